"""What bench/bench_long_jobs.py's measurements (long_jobs.json) mean for one checkpoint at papers scale: per job its
seconds per boundary and minutes per checkpoint (``summarise``), the per-checkpoint hours with the config's fan-out
(``checkpoint_totals``, ``totals``), the critical path of one checkpoint's fanned-out jobs on 64 concurrent slots
(``critical_path``: a list schedule with the workflow's priorities, ``schedule_s``), the fan-out alternatives
(``fanout_alternatives``), and long_jobs.md (``markdown``; ``render`` rewrites it from long_jobs.json).
"""

from __future__ import annotations

import heapq
import json
from pathlib import Path

import numpy as np
from harness import ROOT, write_json, write_text  # bench/harness.py (src/ on sys.path)

from layergeom import config as lgconfig
from layergeom.resources import schur_jobs
from layergeom.spectral.convergence import VARIANTS
from layergeom.spectral.settings import convergence_sizes, schur_chains, schur_order_alphas

#: Paper B's models in config/papers.yaml
MODELS = ("llama-3.1-8b", "olmo-3-7b", "gemma-4-e4b")
LIMIT_MIN = 15.0  # a per-checkpoint job longer than this must be resumable

#: the noise floor of an attention J̄ beyond its grouped-query rank, as a fraction of ‖J̄‖_F: SmolLM2-135M's 30
#: attention J̄ of the default run (results/smollm2-135m/trained/jacobians/L*.attn.npy, d = 576, rank 192) carry
#: 1.1–2.4e-7 of their Frobenius norm in the singular values beyond their rank (the mean here; L0.attn 1.3e-7);
#: a group mean carries the same share (float32 rounding of the Jacobians, common to the sample groups)
ATTN_FLOOR = 1.7e-7


def cpu_view(out: dict, threads: int) -> dict:
    """long_jobs.json with every timing that has a CPU twin replaced by its CPU seconds / `threads`: the wall a
    job would take on `threads` cores of its own with every thread busy (a lower bound; the measured wall on a
    loaded machine an upper one)."""

    def overlay(entry, twin):
        if isinstance(entry, dict) and isinstance(twin, dict):
            return {k: overlay(v, twin.get(k)) if k in twin else v for k, v in entry.items() if k != "cpu"}
        return twin / threads if isinstance(twin, float | int) and not isinstance(twin, bool) else entry

    res = {job: {d: overlay(e, e.get("cpu")) if isinstance(e, dict) and "cpu" in e else e for d, e in by_d.items()}
           for job, by_d in out["results"].items() if job != "rates"}  # fmt: skip
    return {**out, "results": res}


# ---- one checkpoint fanned out: its jobs on `concurrent` slots ------------------------------------------------
def config_chain_segments(out: dict, segments: int | None = None) -> tuple[int, list[tuple[str, str, tuple[int, int]]]]:
    """(spectra.chain_segments of the bench's config file for the first model, as read now, or `segments`; and
    (class, base, (start, end)) of every chain job it makes: ``resources.schur_jobs.schur_chain_segments``, the workflow's
    bounds, with RATES as they are now)."""
    spectra = config_spectra(out)
    S = int(spectra.get("chain_segments") or 1) if segments is None else int(segments)
    spectra = spectra | {"chain_segments": S}
    B = out["models"][MODELS[0]]["boundaries"]
    plan = schur_chains(spectra["alphas"], spectra["schur_orders"], order_alphas=spectra["schur_order_alphas"])
    jobs = [(schur_jobs.schur_chain_class(spectra, ch), schur_jobs.schur_chain_base(spectra, ch), seg)
            for ch in plan for seg in schur_jobs.schur_chain_segments(B, spectra, ch)]  # fmt: skip
    return S, jobs


def config_spectra(out: dict) -> dict:
    """The spectra section of the bench's config file for the first model (read now)."""
    path = Path(out["config"]["file"])
    config = lgconfig.load(path if path.is_absolute() else ROOT / path)
    return lgconfig.model_section(config, MODELS[0], "spectra")


def advance_seconds(chains: dict, base: str) -> float:
    """The advance-only step of a chain of `base` (``advance_s``): an order's is at least its reordered normal
    part J₀^π (``order_s["basis"]``, timed apart; the advance forms it too), its products' share per measured
    order α, as bench/resources_rates.py anchors RATES' ``advance_order``."""
    adv = chains.get("advance_s", {})[base]
    if base != "order" or "order_s" not in chains:
        return adv
    basis = chains["order_s"]["basis"]
    return basis + max(0.0, adv - basis) / max(1, len(chains.get("order_alphas") or [0.0]))


def chain_segment_jobs(chains: dict, segments: list[tuple[str, str, tuple[int, int]]]) -> list[float]:
    """Seconds of each Schur chain job at the measured speeds: per chain job (class, base, (start, end)) of
    ``config_chain_segments``, the advance-only step of its base (``advance_seconds``) × start + its class's full
    step × (end − start)."""
    adv = chains.get("advance_s", {})
    out = []
    for cls, base, (start, end) in segments:
        if start and base not in adv:
            raise SystemExit(f"no advance-only timing of the {base} chains: run --jobs schur_chains first")
        out.append((start * advance_seconds(chains, base) if start else 0.0) + (end - start) * chains["step_s"][cls])
    return out


def schedule_s(preps: list[float], others: list[float], chains: list[float], concurrent: int,
               longest_first: bool = True) -> tuple[float, float]:  # fmt: skip
    """(when the last job ends, when the last chain job ends): a list schedule of one checkpoint's fanned-out jobs
    (seconds) on `concurrent` slots, each job on the slot that frees first, in the workflow's priorities: the
    Schur preps first (every chain job waits on every prep: ``schur_prep_priority``), then the chain jobs once
    the last prep has ended, longest first (``schur_chain_priority``; `longest_first` False: shortest first, the
    worst order), ahead of the jobs of priority 0 (table parts, graph blocks, cumulative variants, convergence
    sizes: here longest first), which take the slots the others leave."""
    free = [0.0] * concurrent
    preps, others = sorted(preps, reverse=True), sorted(others, reverse=True)
    chains = sorted(chains, reverse=longest_first)
    release = 0.0 if not preps else None  # the last prep's end, known once the last prep has started
    end = chain_end = 0.0
    while preps or others or chains:
        t = heapq.heappop(free)
        if preps:
            job = preps.pop(0)
            release = max(release or 0.0, t + job)
        elif chains and (t >= release or not others):
            t = max(t, release)
            job = chains.pop(0)
            chain_end = max(chain_end, t + job)
        else:
            job = others.pop(0)
        heapq.heappush(free, t + job)
        end = max(end, t + job)
    return end, chain_end


def first_wave_n(B: int, through: int, concurrent: int) -> int:
    """The smallest spectra.boundaries_per_job whose jobs per block (table part, Schur prep, graph block: 3 per
    block) and the jobs through depth fit in `concurrent` slots at once."""
    return next((n for n in range(1, B + 1) if 3 * -(-B // n) + through <= concurrent), B)


def critical_path(
    summary: dict,
    chains: dict | None,
    n_boundaries: int,
    concurrent: int = 64,
    *,
    boundaries_per_job: int | None = None,
    cumulative_variant_s: dict | None = None,
    convergence_sizes_s: dict | None = None,
    chain_segments: list[tuple[str, str, tuple[int, int]]] | None = None,
) -> dict:
    """Wall hours of one checkpoint's fanned-out analysis with `concurrent` jobs at this machine's speed, from the
    measured per-boundary times: ``schedule_s`` of its jobs, with n = `boundaries_per_job` (None: ``first_wave_n``):
    per block of n boundaries a table part, a Schur prep and a graph block; the cumulative table's job per variant
    and the convergence table's per subset size, through depth; the Schur chain jobs after the preps
    (`chain_segments`: (class, base, (start, end)) per chain job; default one job per chain of
    ``chains["chains"]`` through every boundary). ``paths_hours``: each kind's longest job, and the end of the
    last chain job.

    ``cumulative_variant_s``: seconds per boundary of each variant's job (:func:`cumulative_variant_boundary_s`);
    ``convergence_sizes_s``: seconds per checkpoint of each size's job (:func:`convergence_size_s`). Without
    them (an old long_jobs.json) the two stay one job each, at the two-variant and all-sizes times."""
    B = n_boundaries
    if chains is not None and chain_segments is None:
        chain_segments = [(c, None, (0, B)) for c, k in chains["chains"].items() for _ in range(k)]
    per = {job: s["boundary_s"] for job, s in summary.items()}
    variants = cumulative_variant_s or {"": per.get("spectra_cumulative", 0.0)}
    sizes = convergence_sizes_s or {"all": B * per.get("spectra_convergence", 0.0)}
    through = len(variants) + len(sizes)
    n = boundaries_per_job or first_wave_n(B, through, concurrent)
    blocks = [min(n, B - i) for i in range(0, B, n)]
    others = [b * per.get(job, 0.0) for job in ("spectra_table", "topology_graph") for b in blocks]
    others += [B * s for s in variants.values()] + list(sizes.values())
    paths = {"spectra_table_part": n * per.get("spectra_table", 0.0),
             "topology_graph_block": n * per.get("topology_graph", 0.0)}  # fmt: skip
    for v, s in variants.items():
        paths[f"spectra_cumulative_variant ({v})" if v else "spectra_cumulative"] = B * s
    S = max(sizes, key=sizes.get)
    paths[f"spectra_convergence_subset (S = {S})" if S != "all" else "spectra_convergence"] = sizes[S]
    preps, jobs = [], []
    if chains is not None:
        preps = [b * chains["prep_s"] for b in blocks]
        jobs = chain_segment_jobs(chains, chain_segments)
    end, chain_end = schedule_s(preps, others, jobs, concurrent)
    if chains is not None:
        paths["spectra_schur_prep + chain"] = chain_end
    hours = {k: v / 3600 for k, v in paths.items()}
    out = {"boundaries_per_job": n, "jobs": 3 * len(blocks) + len(jobs) + through, "chain_jobs": len(jobs),
           "paths_hours": hours, "hours": end / 3600}  # fmt: skip
    if chains is not None:  # the chain jobs started shortest first (what the priorities prevent)
        out["hours_chains_shortest_first"] = schedule_s(preps, others, jobs, concurrent, longest_first=False)[0] / 3600
    return out


def cumulative_variant_boundary_s(res: dict, d: int) -> dict | None:
    """Seconds per boundary of each variant's cumulative job: measured (``bench_cumulative``'s ``variant_s``), or
    for an older measurement of the two-variant step, half of it less the replicates' deviations (``spectra_table``'s,
    the same K at the same d: each variant's job forms them again), the deviations added back."""
    cum = res.get("spectra_cumulative", {}).get(d)
    if cum is None:
        return None
    if "variant_s" in cum:
        return dict(cum["variant_s"])
    table = res.get("spectra_table", {}).get(d, {})
    dev = table.get("deviations_s", 0.0) if table.get("K") == cum["K"] else 0.0
    return {v: dev + (cum["boundary_s"] - dev) / 2 for v in VARIANTS}


def convergence_size_s(conv: dict, n_boundaries: int, n_edge: int) -> dict:
    """Seconds per checkpoint of each subset size's job: :func:`convergence_checkpoint_s` over that size alone."""
    return {S: convergence_checkpoint_s({**conv, "sizes": [S]}, n_boundaries, n_edge) for S in conv["sizes"]}


def _path_inputs(out: dict, d: int) -> dict:
    """The keyword arguments of ``critical_path`` from the measurements (cumulative variants, convergence sizes)."""
    res, B = out["results"], out["models"][MODELS[0]]["boundaries"]
    conv = res.get("spectra_convergence", {}).get(d)
    sizes = None if conv is None else convergence_size_s(conv, B, int(out["config"]["convergence_boundaries"]))
    return {"cumulative_variant_s": cumulative_variant_boundary_s(res, d), "convergence_sizes_s": sizes}


def prefix_hours(chains: dict, segments) -> float:
    """CPU-hours of the chain segments' repeated prefix products (the advance-only steps before each start)."""
    return sum(start * chains["advance_s"][base] for _, base, (start, _) in segments) / 3600


#: the fan-outs ``fanout_alternatives`` compares: spectra.boundaries_per_job × spectra.chain_segments
ALTERNATIVE_BLOCKS = (1, 2, 4, 8, 16)
ALTERNATIVE_SEGMENTS = (1, 2, 3, 4, 6, 8)


def fanout_alternatives(out: dict, d: int) -> list[dict]:
    """The critical path on 64 concurrent jobs and the CPU-hours of the repeated prefix products for each
    spectra.boundaries_per_job × spectra.chain_segments of ``ALTERNATIVE_*`` (the chain segments with RATES as they
    are now), as ``critical_path`` schedules them: what papers.yaml's keys are chosen from."""
    chains = out["results"]["spectra_schur_chains"][d]
    B, rows = out["models"][MODELS[0]]["boundaries"], []
    for S in ALTERNATIVE_SEGMENTS:
        _, segments = config_chain_segments(out, S)
        for n in ALTERNATIVE_BLOCKS:
            cp = critical_path(out["summary"], chains, B, boundaries_per_job=n, chain_segments=segments,
                               **_path_inputs(out, d))  # fmt: skip
            rows.append({"boundaries_per_job": n, "chain_segments": S, "hours": cp["hours"], "jobs": cp["jobs"],
                         "chain_jobs": cp["chain_jobs"], "prefix_cpu_hours": prefix_hours(chains, segments)})  # fmt: skip
    return rows


def checkpoint_totals(out: dict, d: int) -> dict:
    """The per-checkpoint hours of the first model with the config's fan-out (the cumulative table as its variants'
    jobs, the Schur chains as the config's spectra.chain_segments make them: the segments' repeated prefix products
    count, ``spectra_schur_chain_prefixes``; ``total_one_job_per_chain`` without them), and the critical path of
    the config's spectra.boundaries_per_job and chain segments (and with one job per chain), and the alternatives'."""
    hours = {job: s["per_checkpoint_min"][MODELS[0]] / 60 for job, s in out["summary"].items()}
    res, B = out["results"], out["models"][MODELS[0]]["boundaries"]
    variants = cumulative_variant_boundary_s(res, d)
    if variants is not None and "variant_s" in res["spectra_cumulative"][d]:  # its variants' jobs, as fanned out
        hours["spectra_cumulative"] = B * sum(variants.values()) / 3600
    chains = res.get("spectra_schur_chains", {}).get(d)
    if chains is not None and "step_s" not in chains:
        chains = None  # advance-only timings alone
    S, segments = config_chain_segments(out)
    if chains is not None:
        hours["spectra_schur_chain_prefixes"] = prefix_hours(chains, segments)
    got = {"hours": hours | {"total": sum(hours.values())}}
    if "spectra_schur_chain_prefixes" in hours:
        got["hours"]["total_one_job_per_chain"] = sum(hours.values()) - hours["spectra_schur_chain_prefixes"]
    n = config_spectra(out).get("boundaries_per_job")
    kw = _path_inputs(out, d)
    cp = critical_path(out["summary"], chains, B, boundaries_per_job=n, chain_segments=segments, **kw)
    got["critical_path"] = cp | {"chain_segments": S}
    if chains is not None and S > 1:
        _, one = config_chain_segments(out, 1)
        got["one_job_per_chain"] = critical_path(out["summary"], chains, B, boundaries_per_job=n,
                                                 chain_segments=one, **kw)  # fmt: skip
    if chains is not None:
        got["alternatives"] = fanout_alternatives(out, d)
    return got


def totals(out: dict, d: int) -> None:
    """``checkpoint_totals`` into `out`: at the measured wall times (``per_checkpoint_<cpu|gpu>_hours``,
    ``critical_path_hours_64_jobs``, ``fanout_alternatives``), and on the CPU, where the timings carry their CPU
    seconds, at those seconds over the machine's cores (``cpu_time``: the wall of a machine of these cores
    with no other load, a lower bound; the measured wall on a loaded machine an upper one)."""
    kind = "cpu" if out.get("device", "cpu") == "cpu" else "gpu"
    got = checkpoint_totals(out, d)
    out[f"per_checkpoint_{kind}_hours"] = got["hours"]
    out["critical_path_hours_64_jobs"] = got["critical_path"]
    for key, part in (("critical_path_hours_64_jobs_one_job_per_chain", "one_job_per_chain"),
                      ("fanout_alternatives", "alternatives")):  # fmt: skip
        out.pop(key, None)
        if part in got:
            out[key] = got[part]
    out.pop("cpu_time", None)
    twins = [e for by_d in out["results"].values() for e in by_d.values() if isinstance(e, dict) and "cpu" in e]
    if kind == "cpu" and twins:
        c = out["config"]
        view = cpu_view(out, out["machine"]["cpus"])
        view["summary"] = summarise(view, d, c["config_tokens"], int(c["convergence_boundaries"]))
        ideal = checkpoint_totals(view, d)
        out["cpu_time"] = {"cores": out["machine"]["cpus"], "per_checkpoint_hours": ideal["hours"],
                           "critical_path_hours_64_jobs": ideal["critical_path"],
                           "fanout_alternatives": ideal.get("alternatives")}  # fmt: skip


def convergence_checkpoint_s(conv: dict, n_boundaries: int, n_edge: int, scale: float = 1.0) -> float:
    """Seconds per checkpoint: per size, (B − E) plain + E edge boundaries (E = |early ∪ late ∪ middle|) + the final SVDs."""
    n_edge = max(1, min(int(n_edge), n_boundaries))
    names = list(range(n_boundaries))
    E = len(set(names[:n_edge]) | set(names[-n_edge:]) | {names[n_boundaries // 2]})
    per_size = [(n_boundaries - E) * conv["plain_s"][S] + E * conv["edge_s"][S] + conv["final_extra_s"]
                for S in conv["sizes"]]  # fmt: skip
    return scale * float(sum(per_size))


def render(path: Path) -> None:
    """Rewrite long_jobs.md (and the derived summary, totals and critical paths of long_jobs.json) in the folder
    `path` from its long_jobs.json."""
    out = read(path)
    c = out["config"]
    out["summary"] = summarise(out, out["d"], c["config_tokens"], int(c["convergence_boundaries"]))
    totals(out, out["d"])  # recomputed: the rule may have changed since the measurement
    write(path, out)
    write_text(path / "long_jobs.md", markdown(out))


def read(path: Path) -> dict:
    """long_jobs.json of the folder `path`, as the bench built it (``from_json``)."""
    return from_json(json.loads((Path(path) / "long_jobs.json").read_text()))


def write(path: Path, out: dict) -> None:
    """`out` into long_jobs.json of the folder `path`."""
    write_json(Path(path) / "long_jobs.json", out, default=float)


def summarise(out: dict, d: int, config_tokens: int, n_edge: int) -> dict:
    """Per job: seconds per boundary at width d (measured, or d³-extrapolated), and minutes per checkpoint per model."""
    res, models = out["results"], out["models"]
    jobs = {}
    if "spectra_table" in res and d in res["spectra_table"]:
        jobs["spectra_table"] = {"boundary_s": res["spectra_table"][d]["boundary_s"], "measured_d": d}
    if "spectra_cumulative" in res and d in res["spectra_cumulative"]:
        jobs["spectra_cumulative"] = {"boundary_s": res["spectra_cumulative"][d]["boundary_s"], "measured_d": d}
    if "spectra_schur_chains" in res and d in res["spectra_schur_chains"]:
        jobs["spectra_schur"] = {"boundary_s": res["spectra_schur_chains"][d]["boundary_s"], "measured_d": d,
                                 "from": "prep + chain steps"}  # fmt: skip
    elif "spectra_schur" in res:
        dm = max(res["spectra_schur"])
        jobs["spectra_schur"] = {"boundary_s": res["spectra_schur"][dm]["boundary_s"] * (d / dm) ** 3,
                                 "measured_d": dm, **({"scale": (d / dm) ** 3} if dm != d else {})}  # fmt: skip
    if "spectra_convergence" in res:
        conv = res["spectra_convergence"][d]
        jobs["spectra_convergence"] = {"measured_d": d, "per_checkpoint_s": {
            m: convergence_checkpoint_s(conv, info["boundaries"], n_edge) for m, info in models.items()}}  # fmt: skip
        jobs["spectra_convergence"]["boundary_s"] = jobs["spectra_convergence"]["per_checkpoint_s"][MODELS[0]] / models[
            MODELS[0]]["boundaries"]  # fmt: skip
    if "topology_graph" in res:
        t = res["topology_graph"][d]
        scale = config_tokens / t["tokens"]  # the correlation grows with the tokens, the rest does not
        jobs["topology_graph"] = {"boundary_s": t["boundary_s"] + (scale - 1) * t["correlation_s"], "measured_d": d,
                                  "measured_tokens": t["tokens"]}  # fmt: skip
    for job in jobs.values():
        per = job.get("per_checkpoint_s") or {m: job["boundary_s"] * info["boundaries"] for m, info in models.items()}
        job["per_checkpoint_min"] = {m: s / 60 for m, s in per.items()}
        job["over_limit"] = {m: s / 60 > LIMIT_MIN for m, s in per.items()}
        job.pop("per_checkpoint_s", None)
    return jobs


def from_json(out: dict) -> dict:
    """long_jobs.json as main() built it: the widths and subset sizes back to int keys."""

    def ints(x):
        return {int(k) if k.isdigit() else k: ints(v) for k, v in x.items()} if isinstance(x, dict) else x

    return {**out, "results": ints(out["results"])}


def snapshot_gb(d: int, c: dict) -> dict:
    """Bytes of one resume snapshot of the single jobs (the product chains: C and its tangents), in GB, at width d.

    cumulative: 2 variants × (C float64 + K float32 tangents); Schur, per variant (α = 1 with its own N is
    cumulative.tsv's, not composed): the α < 1 of the own N complex (complex128 C, K complex64 tangents),
    the random control (complex128 C, and K complex64 tangents where it carries intervals), and a complex128 C per
    random order and α of schur_order_alphas; convergence: per subset size (the boundary-outer loop carries them
    all), 2 variants × (C + min(4, G) tangents).
    """
    K = c["n_groups"] if c["ci_blocks"] is None else min(c["ci_blocks"], c["n_groups"])
    Ks = min(c["schur_ci_blocks"], c["n_groups"])
    na = len(c["alphas"])
    n_sizes = len(convergence_sizes(c["n_groups"], c["convergence_sizes"]))  # every size's chains at once
    schur = (na - 1) * (16 + 8 * Ks) + sum(a != 0 for a in c["alphas"]) * 16
    if "random" in c["schur_ci_controls"]:
        schur += sum(a != 0 for a in c["alphas"]) * 8 * Ks
    if "schur_orders" in c:
        schur += int(c["schur_orders"]) * len(schur_order_alphas(c["alphas"], c["schur_order_alphas"])) * 16
    per = {"spectra_cumulative": 2 * (8 + 4 * K), "spectra_schur": 2 * schur,
           "spectra_convergence": n_sizes * 2 * (8 + 4 * min(4, c["n_groups"]))}  # fmt: skip
    return {job: b * d * d / 1e9 for job, b in per.items()}


def _loads(runs: list[dict]) -> str:
    """One phrase per bench run: its jobs, its load averages (1/5/15 min) at start and end, the highest 1-min."""
    return "; ".join(
        f"{', '.join(r['jobs'])} ({r['started']}, {r['wall_s'] / 60:.0f} min): load "
        f"{'/'.join(f'{x:.1f}' for x in r['load_average_at_start'])} at the start, "
        f"{'/'.join(f'{x:.1f}' for x in r['load_average_at_end'])} at the end, at most "
        f"{r['load_average_1min_max']:.1f}"
        for r in runs
    )


def _routes(routes: dict) -> str:
    """The singular-value route of each product of a chain's timed step (an order's: both variants')."""
    return ", ".join(
        f"`{key.split('/')[0]}` {'certified low rank' if r.get('lowrank') else 'full SVD'}" for key, r in routes.items()
    )


def _alternatives_table(alts: list[dict]) -> list[str]:
    """The fan-out alternatives as a table: spectra.boundaries_per_job by rows, spectra.chain_segments by columns."""
    Ss = sorted({r["chain_segments"] for r in alts})
    cell = {(r["boundaries_per_job"], r["chain_segments"]): r for r in alts}
    best = min(alts, key=lambda r: (round(r["hours"], 2), r["prefix_cpu_hours"], r["jobs"]))
    L = [
        "| `boundaries_per_job` | " + " | ".join(f"`chain_segments: {S}`" for S in Ss) + " |",
        "|---:|" + "---:|" * len(Ss),
    ]
    for n in sorted({r["boundaries_per_job"] for r in alts}):
        cells = []
        for S in Ss:
            r = cell[n, S]
            text = f"{r['hours']:.2f} h ({r['jobs']}; {r['prefix_cpu_hours']:.1f})"
            cells.append(f"**{text}**" if r is best else text)
        L.append(f"| {n} | " + " | ".join(cells) + " |")
    return L


def _cpu_time_text(out: dict) -> list[str]:
    """The totals at the CPU time over the machine's cores (``totals``' ``cpu_time``), a line, or nothing."""
    ct = out.get("cpu_time")
    if not ct:
        return []
    h, cp = ct["per_checkpoint_hours"], ct["critical_path_hours_64_jobs"]
    return [f"At the CPU seconds the timed calls took over the machine's {ct['cores']} cores (`cpu_time`: the same "
            "work on these cores with no other load, a lower bound on its wall time, where the measured wall on a "
            f"loaded machine is an upper one): **{h['total']:.1f} hours** per checkpoint"
            + (f" ({h['spectra_schur_chain_prefixes']:.1f} h of repeated prefixes)"
               if "spectra_schur_chain_prefixes" in h else "")
            + f", and the last job of the fanned-out checkpoint ends after **{cp['hours']:.2f} h** on 64 "
            "concurrent jobs.\n"]  # fmt: skip


def markdown(out: dict) -> str:
    res, models, mach, c = out["results"], out["models"], out["machine"], out["config"]
    d = out["d"]
    B = models[MODELS[0]]["boundaries"]
    per_model = ", ".join(f"{v['label']} {v['boundaries']}" for v in models.values())
    sch = res.get("spectra_schur_chains", {}).get(d)
    totals_text = [
        f"One {models[MODELS[0]]['label']} checkpoint: **{v['total']:.1f} {k.split('_')[2].upper()}-hours** "
        f"(`{k}` in long_jobs.json)"
        + (f", of which {v['spectra_schur_chain_prefixes']:.1f} h the Schur chain segments' repeated prefix "
           f"products ({v['total_one_job_per_chain']:.1f} h with one job per chain)"
           if "spectra_schur_chain_prefixes" in v else "")
        + ".\n"
        for k, v in out.items()
        if k.startswith("per_checkpoint_") and k.endswith("_hours")
    ]  # fmt: skip
    attn = (sch or {}).get("boundaries", {}).get("attention")
    L = [
        "# Long per-checkpoint jobs at papers scale (bench/bench_long_jobs.py)",
        "",
        f"One boundary of each job that loops over a checkpoint's boundaries, timed with the project's functions "
        f"and the settings of `{c['file']}` on synthetic d×d J̄ with {c['n_groups']} float32 group means (group "
        f"sizes {min(c['group_counts'])}–{max(c['group_counts'])} samples): an attention J̄ of grouped-query rank "
        f"d/4 (group means A(B + 2 % noise) plus a noise floor of {c.get('attn_floor', ATTN_FLOOR):.2g} of ‖J̄‖_F "
        "beyond the rank, shared by the groups, as SmolLM2-135M's attention J̄ carry)"
        + (f", measured {attn['tail']:.2g} outside its rank, {attn['n_nonzero']} non-zero modes" if attn else "")
        + "; an MLP J̄, a Gaussian bulk of spectral norm ≈ 1 plus a rank-32 part (full rank, non-normal), group "
        "means J̄ + 2 % noise. The tables, the cumulative chains and the Schur surgery are timed on both kinds "
        f"(their mean per boundary; the blocks alternate them); topology on {c['tokens']:,} float32 activation "
        f"rows (signed factor model as in bench_topology.py). Per checkpoint = per boundary × boundaries "
        f"({per_model}).",
        "",
        f"Machine: {mach['cpus']} CPUs ({mach['processor']}), {mach['platform']}, numpy {mach['numpy']} "
        f"(OpenBLAS, default threads: every core), scipy {mach['scipy']}; OMP_WAIT_POLICY={mach['OMP_WAIT_POLICY']}. "
        f"The bench ran in parts ({_loads(mach.get('runs', []))}): the machine is shared, and a load above the CPU "
        "count inflates the times."
        + "".join(f" `{job}` is carried over from {why}." for job, why in out.get("carried", {}).items()),
        "",
        f"## Per boundary (d = {d}) and per checkpoint, on these {mach['cpus']} cores"
        + (f" and the device `{out['device']}`" if out.get("device", "cpu") != "cpu" else ""),
        "",
        *totals_text,
        *_cpu_time_text(out),
        f"Over {LIMIT_MIN:.0f} min per checkpoint (**bold**): the job must be resumable (or split) at papers scale.",
        "",
        "| job | s per boundary | measured at | "
        + " | ".join(f"{v['label']} min/ckpt" for v in models.values())
        + " |",
        "|---|---:|---|" + "---:|" * len(models),
    ]
    for job, s in out["summary"].items():
        where = f"d={s['measured_d']}" + (f", ×{s['scale']:.0f} (d³)" if "scale" in s else "")
        if job == "topology_graph" and s["measured_tokens"] != c["config_tokens"]:
            where += f", {s['measured_tokens']:,} tokens (correlation scaled to {c['config_tokens']:,})"
        if job == "spectra_convergence":
            where += f", mean over {B} boundaries × {len(res[job][d]['sizes'])} sizes"
        mins = [f"**{v:.0f}**" if s["over_limit"][m] else f"{v:.1f}" for m, v in s["per_checkpoint_min"].items()]
        L.append(f"| `{job}` | {s['boundary_s']:.0f} | {where} | " + " | ".join(mins) + " |")
    cp = out.get("critical_path_hours_64_jobs")
    if cp:
        S = cp["chain_segments"]
        L += ["", f"Fanned out as `{c['file']}` sets it (`spectra.boundaries_per_job: {cp['boundaries_per_job']}`, "
              f"`spectra.chain_segments: {S}`: {cp['chain_jobs']} Schur chain jobs, {cp['jobs']} jobs per "
              f"{models[MODELS[0]]['label']} checkpoint) on 64 concurrent jobs, the last job ends after "
              f"**{cp['hours']:.2f} h** at these per-boundary speeds (`critical_path_hours_64_jobs`; "
              "`critical_path`: a list schedule with the workflow's priorities). Each kind's longest job: "
              + ", ".join(f"{k} {v:.2f} h" for k, v in cp["paths_hours"].items() if k != "spectra_schur_prep + chain")
              + f"; the Schur preps and chain jobs end at {cp['paths_hours'].get('spectra_schur_prep + chain', 0):.2f} h "
              f"(started shortest first instead of longest first: {cp.get('hours_chains_shortest_first', 0):.2f} h)."]  # fmt: skip
        one = out.get("critical_path_hours_64_jobs_one_job_per_chain")
        if one and sch:
            adv = ", ".join(f"{k} {v:.1f} s" for k, v in sch["advance_s"].items())
            L += ["", f"A chain of the costliest class runs as {S} jobs over consecutive depths, a cheaper one as "
                  f"ceil({S} × its one-job time / the costliest's) (`resources.schur_jobs.schur_chain_segments`): a segment's "
                  f"job advances its chain's products through the depths before its own (no SVD: {adv} per depth, "
                  "timed at depths 2 and 3), then steps through its own. The repeated prefix products cost "
                  f"{out['per_checkpoint_cpu_hours']['spectra_schur_chain_prefixes']:.1f} CPU-hours per checkpoint "
                  f"(in the total above). With one job per chain ({one['chain_jobs']} chain jobs) the last job "
                  f"ends after {one['hours']:.2f} h."]  # fmt: skip
        for alts, how in ((out.get("fanout_alternatives"), "at the measured wall times"),
                          ((out.get("cpu_time") or {}).get("fanout_alternatives"),
                           f"at the CPU time over {mach['cpus']} cores")):  # fmt: skip
            if alts:
                L += ["", f"The alternatives {how} (`fanout_alternatives`): hours until the last job ends on 64 "
                      "concurrent jobs (jobs per checkpoint; hours of repeated prefix products):", "",
                      *_alternatives_table(alts)]  # fmt: skip
        variants = cumulative_variant_boundary_s(res, d)
        if variants and "spectra_convergence" in res:
            cum = res["spectra_cumulative"][d]
            how = ("measured through attention, MLP, attention, MLP, the last timed, with the deviations each "
                   "variant's job forms" if "variant_s" in cum else
                   "half of the measured two-variant step, the deviations counted in full")  # fmt: skip
            L += ["", f"The cumulative table runs as a job per variant ({how}): "
                  + ", ".join(f"{v} {s:.1f} s" for v, s in variants.items()) + " per boundary. The convergence "
                  "table runs as a job per subset size, each the measured per-size plain and edge steps over the "
                  "checkpoint's boundaries plus the final SVDs: "
                  + ", ".join(f"S = {S} {t / 3600:.2f} h" for S, t in convergence_size_s(
                      res["spectra_convergence"][d], B, c["convergence_boundaries"]).items()) + "."]  # fmt: skip
    L += ["", "## Where the time goes", ""]
    if "spectra_table" in res:
        L += [f"`spectra_table` (K = {c['n_groups'] if c['ci_blocks'] is None else c['ci_blocks']} replicates, "
              f"{c['ci_method']} intervals):", "",
              "| d | boundary | deviations | decompose (eig + vectors, SVD) | metrics + replicates | total | Henrici |",
              "|---:|---|---:|---:|---:|---:|---:|"]  # fmt: skip
        for dd, t in res["spectra_table"].items():
            for kind, k in (t.get("by_kind") or {"mlp": t}).items():
                L.append(f"| {dd} | {kind} | {k['deviations_s']:.1f} | {k['decompose_s']:.1f} | "
                         f"{k['metrics_and_replicates_s']:.1f} | {k['boundary_s']:.1f} | {k['henrici']:.2f} |")  # fmt: skip
        L.append("")
    if "spectra_cumulative" in res:
        L += ["`spectra_cumulative`, one variant's job at depth 4 (K tangents): "
              + "; ".join(f"d={dd}: " + ", ".join(f"{v} {s:.1f} s" for v, s in t["variant_s"].items())
                          + f" (of which the deviations {np.mean(list(t['deviations_s'].values())):.1f} s)"
                          for dd, t in res["spectra_cumulative"].items() if "variant_s" in t) + ".", ""]  # fmt: skip
    if "spectra_schur" in res:
        L += [f"`spectra_schur` as one job (α = {c['alphas']}): "
              + "; ".join(f"d={dd}: boundary 1 {t['boundary1_s']:.1f} s, boundary 2 {t['boundary_s']:.1f} s"
                          for dd, t in res["spectra_schur"].items()) + ".", ""]  # fmt: skip
    if sch and "step_s" in sch:
        bk = sch["boundaries"]
        L += [f"`spectra_schur` as its fanned-out jobs take it (d = {d}, K = {sch['K']} blocks, random orders at α "
              f"{sch['order_alphas']}): a prep "
              + ", ".join(f"{k} {b['prep_s']:.1f} s (Henrici {b['henrici']:.2f}, {b['n_nonzero']} non-zero modes)"
                          for k, b in bk.items())
              + f", {sch['prep_s']:.1f} s per boundary on average; per cost class one chain through "
              f"{', '.join(sch['depths'])}, the step at depth {len(sch['depths'])} timed (it rebuilds its operators "
              "from the prep's arrays, forms the deviations where it carries an interval, multiplies and takes the "
              "singular values):", "",
              "| class | chains | step (s) | singular values | advance-only (s) | example |", "|---|---:|---:|---|---:|---|"]  # fmt: skip
        for cls, s in sch["step_s"].items():
            base = cls.split("_")[0]
            L.append(f"| `{cls}` | {sch['chains'][cls]} | {s:.1f} | {_routes(sch['routes'][cls])} | "
                     f"{sch['advance_s'].get(base, float('nan')):.1f} | `{tuple(sch['examples'][cls])}` |")  # fmt: skip
        if "order_s" in sch:
            o = sch["order_s"]
            L += ["", f"An order's step: its reordered normal part J₀^π {o['basis']:.1f} s, then per α the `update` "
                  f"product and singular values {o['update']:.1f} s and the `full` ones {o['full']:.1f} s."]  # fmt: skip
        L += ["", f"{sch['boundary_s']:.0f} s per boundary in all (the prep and every chain's step).", ""]
    if "spectra_convergence" in res:
        conv = res["spectra_convergence"][d]
        L += [f"`spectra_convergence` (sizes {conv['sizes']} of {c['n_groups']} groups; per size every boundary "
              f"advances both product chains, and the first/last {c['convergence_boundaries']} and the middle "
              f"boundary also recompute decomposition, metrics and S replicates; the final boundary adds the erank "
              f"SVDs, {conv['final_extra_s']:.1f} s):", "",
              "| S groups | plain boundary (s) | edge boundary (s) |", "|---:|---:|---:|"]  # fmt: skip
        L += [f"| {S} | {conv['plain_s'][S]:.1f} | {conv['edge_s'][S]:.1f} |" for S in conv["sizes"]]
        L.append("")
    if "topology_graph" in res:
        t = res["topology_graph"][d]
        L += [f"`topology_graph`: {t['tokens']:,} tokens, top-{c['topology']['top_k']}, γ = "
              f"{c['topology']['resolution']}, sweep {c['topology']['resolution_sweep']}: {t['boundary_s']:.1f} s "
              f"per boundary, of which the streamed float64 correlation {t['correlation_s']:.1f} s (timed alone; it "
              f"grows linearly with the tokens); {t['communities']} communities, {t['edges']} edges.", ""]  # fmt: skip
    if "rates" in res:
        ds = list(res["rates"])
        keys = list(res["rates"][ds[0]])
        L += ["## The machine: GEMM rates and the LAPACK calls (to scale to another node)", "",
              "| | " + " | ".join(f"d = {dd}" for dd in ds) + " |", "|---|" + "---:|" * len(ds)]  # fmt: skip
        for k in keys:
            L.append(f"| {k} | " + " | ".join(str(res["rates"][dd][k]) for dd in ds) + " |")
        L += ["", "GEMM: best of 3 products of two d×d matrices (a complex product counted as 8d³ flops). Each "
              "decomposition is timed once, and on this shared machine a single timing can be inflated by other "
              "processes (they grow about as d³, ×8 per doubling: a smaller ratio between the columns means the "
              "smaller one was slowed). The spectral jobs are bound by these calls: a node with R× this machine's "
              "rates (and as many BLAS threads) runs them about R× faster.", ""]  # fmt: skip
    L += [
        "## Caveats",
        "",
        "- Two synthetic boundaries, one of each kind, stand for a checkpoint's: real J̄ differ in spectrum and "
        "non-normality, which moves the eigen- and Schur decompositions' iterations; the products and SVDs, most "
        "of the time, are the same.",
        "- The `update` products take the certified low-rank route from the second attention boundary on (the "
        "first two depths of a real chain take the full SVD: 2 of 64 depths at about the `full` variant's step). "
        "A random control's `update` products are of full rank (R' fills the strictly upper triangle), so they "
        "take the full SVD after the range finder's attempt.",
        "- A J̄ with Henrici departure below 0.1 (near-normal) takes an exact `eigvals` per replicate in "
        "`spectra_table` (`linear.HENRICI_EXACT_BELOW`): K × `eigvals_s` more per such boundary.",
        "- Files are not read: the group means and a prep's arrays sit in memory. The jobs memory-map the group "
        "means (G·d²·4 B = 1.1 GB per boundary at d = 4096), read the prep's .npz (up to ~2 GB per boundary) and "
        "the activations (tokens·d·4 B = 2.1 GB per boundary) from disk; add that I/O on a slow file system.",
        "- `spectra_convergence` has no per-boundary entry point: its step is the loop body of "
        "`convergence_rows`, rebuilt from the same calls (`convergence_step` here).",
        f"- Gemma-4-E4B's rows are at d = {d} too; its text decoder is narrower (an effective-4B model: see "
        "hidden_size in its hub config), so they are upper bounds: scale by (d/4096)³ for the spectral jobs and "
        "by d² for the correlation.",
        "- Not timed: the resume snapshots (`layergeom.resume.Snapshots`, written every `snapshot_minutes`). One "
        f"of a single job holds its product chains, at d = {d}: "
        + ", ".join(f"`{j}` ≈ {gb:.1f} GB" for j, gb in snapshot_gb(d, c).items())
        + " (C and the K tangents of every chain), written atomically each time; a fanned-out job's holds its own "
        "chain's.",
        "",
    ]
    return "\n".join(L)
