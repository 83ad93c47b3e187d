"""The ``train`` model source: train a small model offline and keep checkpoints at log-spaced steps.

Each checkpoint is an ordinary checkpoint (safetensors + config + tokenizer), so every analysis runs on
it through the normal checkpoint axis. Training is deterministic on the CPU for a fixed seed and thread
count: two runs give bit-identical checkpoints.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import numpy as np
import torch

from .models import build_random, save_checkpoint
from .runtime import LayergeomError, atomic_path, progress
from .schedule import log_spaced_steps  # noqa: F401  (torch-free: the DAG is built from it)

log = logging.getLogger("layergeom")


def split_windows(tokens: np.ndarray, heldout_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A seeded split of all windows into training and held-out sets."""
    n = len(tokens)
    n_held = max(1, int(round(heldout_fraction * n)))
    if n - n_held < 1:
        raise LayergeomError(f"train: only {n} windows, too few to hold out {n_held}")
    perm = np.random.default_rng(seed).permutation(n)
    return tokens[np.sort(perm[n_held:])], tokens[np.sort(perm[:n_held])]


@torch.no_grad()
def heldout_loss(model, tokens: torch.Tensor, batch_size: int) -> float:
    """Mean next-token cross-entropy (nats) over held-out windows."""
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(tokens), batch_size):
        ids = tokens[i : i + batch_size]
        out = model(input_ids=ids, labels=ids)
        n = ids[:, 1:].numel()
        total += float(out.loss) * n
        count += n
    model.train()
    return total / count


def train(
    family: str,
    hf_config: dict,
    tokens: np.ndarray,
    tokenizer,
    tcfg: dict,
    out_dir: str | Path,
    model_name: str,
    device: str = "cpu",
) -> list[dict]:
    """Train from a seeded init on `tokens` (n, T); write ``out_dir/step{N}/`` checkpoints and curves.

    Returns the loss-curve rows (step, train_loss, heldout_loss for checkpoint steps).
    """
    seed = int(tcfg["seed"])
    torch.manual_seed(seed)
    train_tok, held_tok = split_windows(tokens, tcfg["heldout_fraction"], seed)
    train_t, held_t = torch.as_tensor(train_tok, device=device), torch.as_tensor(held_tok, device=device)
    steps_total = int(tcfg["steps"])
    keep = set(log_spaced_steps(steps_total, int(tcfg["n_checkpoints"])))
    model = build_random(family, hf_config, seed).to(device)
    model.config._attn_implementation = "sdpa"  # fused attention for training; analyses reload with eager
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=tcfg["lr"], weight_decay=tcfg["weight_decay"], betas=(0.9, 0.95))
    warm = max(1, int(tcfg["warmup_fraction"] * steps_total))

    def lr_at(step):  # linear warm-up, cosine decay to 10 %
        if step < warm:
            return (step + 1) / warm
        p = (step - warm) / max(1, steps_total - warm)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    gen = torch.Generator().manual_seed(seed + 1)
    rows: list[dict] = []
    out_dir = Path(out_dir)
    bs = int(tcfg["batch_size"])
    with atomic_path(out_dir, is_dir=True) as tmp:
        train_loss = float("nan")
        for step in progress(range(steps_total + 1), desc="train", unit="step"):
            if step in keep:
                h = heldout_loss(model, held_t, bs)
                rows.append({"step": step, "train_loss": train_loss, "heldout_loss": h})
                log.info("step %d train %.4f held-out %.4f", step, train_loss, h)
                model.eval()
                model.config._attn_implementation = "eager"
                info = {"model": model_name, "checkpoint": f"step{step}", "source": "train", "revision": f"step{step}"}
                save_checkpoint(model, tokenizer, tmp / f"step{step}", info)
                model.config._attn_implementation = "sdpa"
                model.train()
            if step == steps_total:
                break
            idx = torch.randint(0, len(train_t), (bs,), generator=gen).to(device)
            ids = train_t[idx]
            loss = model(input_ids=ids, labels=ids).loss
            if not torch.isfinite(loss):
                raise LayergeomError(f"train: loss became {float(loss)} at step {step}; lower train.lr")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), tcfg["grad_clip"])
            opt.step()
            sched.step()
            train_loss = float(loss.detach())
            if step % max(1, steps_total // 50) == 0:
                rows.append({"step": step, "train_loss": train_loss, "heldout_loss": float("nan")})
        rows.sort(key=lambda r: (r["step"], math.isnan(r["heldout_loss"])))
        with open(tmp / "curves.tsv", "w") as f:
            f.write("step\ttrain_loss\theldout_loss\n")
            for r in rows:
                f.write(f"{r['step']}\t{r['train_loss']:.6g}\t{r['heldout_loss']:.6g}\n")
        (tmp / "train.json").write_text(
            json.dumps(
                {"steps": sorted(keep), "n_train_windows": len(train_tok), "n_heldout_windows": len(held_tok), **tcfg},
                indent=2,
            )
            + "\n"
        )
    return rows
