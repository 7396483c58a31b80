#!/usr/bin/python3
"""Builds a small GPT-2-shaped model in PyTorch (written by hand, with
Hugging Face's parameter names and Conv1D layout), writes it as a Hugging
Face directory (config.json + model.safetensors, F32) and records, in
float64 from the float32 weights, the logits, losses and per-example
gradient norms of fixed inputs (fixtures.json), which gpt2_test.go
compares with the imported model. Not run by CI; rerun with
/usr/bin/python3 make_fixtures.py (Debian's python3-torch).
"""
import json, math, struct, sys
import torch

torch.manual_seed(20261205)
CFG = dict(model_type="gpt2", vocab_size=50, n_positions=16, n_embd=32, n_layer=2, n_head=4,
           n_inner=None, activation_function="gelu_new", layer_norm_epsilon=1e-5,
           architectures=["GPT2LMHeadModel"], tie_word_embeddings=True)


class Conv1D(torch.nn.Module):
    def __init__(self, nin, nout):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(nin, nout) * 0.1)
        self.bias = torch.nn.Parameter(torch.randn(nout) * 0.1)

    def forward(self, x):
        return x @ self.weight + self.bias


class LN(torch.nn.LayerNorm):
    def __init__(self, d, eps):
        super().__init__(d, eps=eps)
        with torch.no_grad():
            self.weight.add_(torch.randn(d) * 0.1)
            self.bias.add_(torch.randn(d) * 0.1)


class Attn(torch.nn.Module):
    def __init__(self, d, nh):
        super().__init__()
        self.nh = nh
        self.c_attn = Conv1D(d, 3 * d)
        self.c_proj = Conv1D(d, d)

    def forward(self, x):
        T, D = x.shape
        q, k, v = self.c_attn(x).split(D, dim=1)
        dh = D // self.nh
        q = q.view(T, self.nh, dh).transpose(0, 1)
        k = k.view(T, self.nh, dh).transpose(0, 1)
        v = v.view(T, self.nh, dh).transpose(0, 1)
        s = q @ k.transpose(1, 2) / math.sqrt(dh)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        s = s.masked_fill(mask, float("-inf"))
        o = torch.softmax(s, dim=-1) @ v
        return self.c_proj(o.transpose(0, 1).reshape(T, D))


def gelu_new(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


class MLP(torch.nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.c_fc = Conv1D(d, h)
        self.c_proj = Conv1D(h, d)

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


class Block(torch.nn.Module):
    def __init__(self, d, nh, h, eps):
        super().__init__()
        self.ln_1 = LN(d, eps)
        self.attn = Attn(d, nh)
        self.ln_2 = LN(d, eps)
        self.mlp = MLP(d, h)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["n_embd"]
        self.wte = torch.nn.Embedding(c["vocab_size"], d)
        self.wpe = torch.nn.Embedding(c["n_positions"], d)
        with torch.no_grad():
            self.wte.weight.mul_(0.3)
            self.wpe.weight.mul_(0.3)
        self.h = torch.nn.ModuleList([Block(d, c["n_head"], 4 * d, c["layer_norm_epsilon"]) for _ in range(c["n_layer"])])
        self.ln_f = LN(d, c["layer_norm_epsilon"])

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(len(ids)))
        for b in self.h:
            x = b(x)
        return self.ln_f(x) @ self.wte.weight.T


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        b = t.detach().to(torch.float32).contiguous().numpy().tobytes()
        header[name] = dict(dtype="F32", shape=list(t.shape), data_offsets=[off, off + len(b)])
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


model = GPT2(CFG)
# The file holds float32; the reference runs in float64 on those values.
sd = {k: v.detach().to(torch.float32) for k, v in model.state_dict().items()}
write_safetensors("model.safetensors", sd)
with open("config.json", "w") as f:
    json.dump(CFG, f, indent=2)
model = model.double()
with torch.no_grad():
    for k, p in model.named_parameters():
        p.copy_(sd[k].double())

gen = torch.Generator().manual_seed(7)
inputs = [torch.randint(0, CFG["vocab_size"], (n,), generator=gen) for n in (16, 16, 10, 2)]
out = dict(inputs=[x.tolist() for x in inputs], logits=[], loss=[], grad_norm=[], tensor_norms=[])
for ids in inputs:
    model.zero_grad()
    logits = model(ids)
    loss = torch.nn.functional.cross_entropy(logits[:-1], ids[1:])
    loss.backward()
    out["logits"].append(logits.detach().flatten().tolist())
    out["loss"].append(loss.item())
    norms = {k: p.grad.norm().item() for k, p in model.named_parameters()}
    out["tensor_norms"].append(norms)
    out["grad_norm"].append(math.sqrt(sum(v * v for v in norms.values())))
with open("fixtures.json", "w") as f:
    json.dump(out, f)
print("wrote config.json, model.safetensors, fixtures.json", file=sys.stderr)
