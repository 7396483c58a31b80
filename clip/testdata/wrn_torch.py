#!/usr/bin/env python3
"""WRN-16-4 with GroupNorm(16) in PyTorch, the architecture of models.NewWRN16x4
(pre-activation blocks, strided 1x1 shortcut on the block input), timed as
torch_dpsgd_bench.py times the CIFAR CNN: non-private SGD and functorch
vmap(grad) per-example gradients with flat clipping and Gaussian noise.

    OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 clip/testdata/wrn_torch.py --batch 64 --steps 3
"""
import argparse, json, statistics, time
import torch, torch.nn as nn, torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, cin, cout, stride, groups=16):
        super().__init__()
        self.n1 = nn.GroupNorm(groups, cin)
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1)
        self.n2 = nn.GroupNorm(groups, cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1)
        self.sc = nn.Conv2d(cin, cout, 1, stride, 0) if (stride != 1 or cin != cout) else None

    def forward(self, x):
        h = self.c1(F.relu(self.n1(x)))
        h = self.c2(F.relu(self.n2(h)))
        return h + (self.sc(x) if self.sc is not None else x)


def wrn(classes=10):
    layers = [nn.Conv2d(3, 16, 3, 1, 1)]
    cin = 16
    for g, w in enumerate([64, 128, 256]):
        for k in range(2):
            layers.append(Block(cin, w, 2 if (g > 0 and k == 0) else 1))
            cin = w
    layers += [nn.GroupNorm(16, 256), nn.ReLU(), nn.AvgPool2d(8), nn.Flatten(), nn.Linear(256, classes)]
    return nn.Sequential(*layers)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--modes", default="nonprivate,vmap")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(a.batch, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (a.batch,), generator=g)
    for mode in a.modes.split(","):
        model = wrn()
        nparams = sum(p.numel() for p in model.parameters())
        if mode == "nonprivate":
            opt = torch.optim.SGD(model.parameters(), lr=0.05)

            def step():
                opt.zero_grad(set_to_none=True)
                F.cross_entropy(model(x), y).backward()
                opt.step()
        else:
            from functorch import make_functional, vmap, grad
            fmodel, params = make_functional(model)

            def loss1(p, xi, yi):
                return F.cross_entropy(fmodel(p, xi.unsqueeze(0)), yi.unsqueeze(0))

            pgrad = vmap(grad(loss1), in_dims=(None, 0, 0))

            def step():
                nonlocal params
                gs = pgrad(params, x, y)
                norms = torch.sqrt(sum((gi.reshape(a.batch, -1) ** 2).sum(1) for gi in gs))
                c = torch.clamp(1.0 / (norms + 1e-6), max=1.0)
                new = []
                for p, gi in zip(params, gs):
                    s = (gi * c.view(-1, *([1] * (gi.dim() - 1)))).sum(0)
                    s = s + torch.randn_like(s)
                    new.append((p - 0.05 / a.batch * s).detach())
                params = tuple(new)
        step()
        ts, cs = [], []
        for _ in range(a.steps):
            t0, c0 = time.perf_counter(), time.process_time()
            step()
            ts.append(time.perf_counter() - t0)
            cs.append(time.process_time() - c0)
        print(json.dumps({"model": "wrn16-4", "params": nparams, "mode": mode, "batch": a.batch,
                          "ex_per_s_median": a.batch / statistics.median(ts),
                          "cpu_ms_per_example": 1000 * statistics.median(cs) / a.batch}))


if __name__ == "__main__":
    main()
