#!/usr/bin/python3
"""PyTorch's non-private training step on the GPT-2-shaped model of
BenchmarkGPT2Step (models/transformer_bench_test.go): vocabulary 20000,
context 128, dimension 256, 4 heads, 6 blocks, batch B of full-length
sequences. MODE=lora trains rank-8 adapters on attn.c_attn and
attn.c_proj with the base frozen (requires_grad False); MODE=full trains
everything. Prints one JSON line: ms per step (median of STEPS timed
steps after one warm-up), examples/s, peak RSS. Not run by CI.

    THREADS=2 BATCH=16 MODE=lora /usr/bin/python3 bench_torch.py
"""
import json, math, os, resource, statistics, time
import torch

threads = int(os.environ.get("THREADS", "2"))
torch.set_num_threads(threads)
B = int(os.environ.get("BATCH", "16"))
STEPS = int(os.environ.get("STEPS", "3"))
MODE = os.environ.get("MODE", "lora")
V, T, D, H, L, R = 20000, 128, 256, 4, 6, 8


class Conv1D(torch.nn.Module):
    def __init__(self, nin, nout, lora=False):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(nin, nout) * 0.02)
        self.bias = torch.nn.Parameter(torch.zeros(nout))
        self.lora = lora
        if lora:
            self.lora_A = torch.nn.Parameter(torch.randn(nin, R) * 0.1)
            self.lora_B = torch.nn.Parameter(torch.full((R, nout), 0.01))

    def forward(self, x):
        y = x @ self.weight + self.bias
        if self.lora:
            y = y + (2.0 * (x @ self.lora_A)) @ self.lora_B
        return y


class Block(torch.nn.Module):
    def __init__(self, lora):
        super().__init__()
        self.ln_1 = torch.nn.LayerNorm(D)
        self.c_attn = Conv1D(D, 3 * D, lora)
        self.c_proj = Conv1D(D, D, lora)
        self.ln_2 = torch.nn.LayerNorm(D)
        self.c_fc = Conv1D(D, 4 * D)
        self.mlp_proj = Conv1D(4 * D, D)
        self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), 1))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(D, dim=2)
        dh = D // H
        q, k, v = (z.view(b, t, H, dh).transpose(1, 2) for z in (q, k, v))
        s = (q @ k.transpose(2, 3)) / math.sqrt(dh)
        s = s.masked_fill(self.mask[:t, :t], float("-inf"))
        o = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.c_proj(o)
        h = self.c_fc(self.ln_2(x))
        h = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
        return x + self.mlp_proj(h)


class GPT2(torch.nn.Module):
    def __init__(self, lora):
        super().__init__()
        self.wte = torch.nn.Embedding(V, D)
        self.wpe = torch.nn.Embedding(T, D)
        self.h = torch.nn.ModuleList([Block(lora) for _ in range(L)])
        self.ln_f = torch.nn.LayerNorm(D)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))
        for b in self.h:
            x = b(x)
        return self.ln_f(x) @ self.wte.weight.T


torch.manual_seed(0)
model = GPT2(MODE == "lora")
if MODE == "lora":
    for n, p in model.named_parameters():
        p.requires_grad = "lora_" in n
params = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.SGD(params, lr=0.01)
ids = torch.randint(0, V, (B, T))
times = []
for i in range(STEPS + 1):
    t0 = time.perf_counter()
    opt.zero_grad()
    logits = model(ids)
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    if i > 0:
        times.append(time.perf_counter() - t0)
ms = statistics.median(times) * 1000
print(json.dumps(dict(program="pytorch", mode=MODE, batch=B, threads=threads,
                      params=sum(p.numel() for p in model.parameters()),
                      trained=sum(p.numel() for p in params), ms_per_step=round(ms, 1),
                      examples_per_s=round(B / ms * 1000, 2),
                      maxrss_mib=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))))
