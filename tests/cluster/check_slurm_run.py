"""Check a workflow run made through `--executor slurm` against SLURM's own records.

    python tests/cluster/check_slurm_run.py WORKDIR [--expect-gpu]

Every job's log under WORKDIR/logs starts with the line that `layergeom.workflow.job` writes:
`job rule=<rule> host=<host> slurm_job_id=<id|none> cuda_visible_devices=<ids|none>`. This checks that
- every log has that line (a script that skips `job(...)` would escape the check);
- jobs of `localrules` ran on the submitting host (no SLURM job id), by design;
- every other job ran under its own SLURM job id, which SLURM knows (`squeue --states=all`, kept for
  MinJobAge) as COMPLETED, submitted from this working directory, for this rule (the plugin's
  `--comment rule_<rule>...`), with a `.snakemake/slurm_logs/` log;
- except the jobs of rules with a `group:` (the per-layer tokenwise fits): those whose logs share a folder
  (logs/<rule>/<model>/<checkpoint>/) ran together in one SLURM job, submitted as that group, and no two
  folders share one (one cluster job per (model, checkpoint));
- the jobs that asked SLURM for a GPU (`gres:gpu` in SLURM's record) saw CUDA_VISIBLE_DEVICES and the
  others did not; with --expect-gpu at least one job asked for one;
- SLURM ran no other job from this working directory (nothing submitted twice or left over).
Prints a per-rule table and exits 1 with the reasons on any failure.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JOB_LINE = re.compile(
    r"job rule=(?P<rule>\S+) host=(?P<host>\S+) slurm_job_id=(?P<slurm>\S+) cuda_visible_devices=(?P<cuda>\S+)"
)


def local_rules(root: Path = ROOT) -> set[str]:
    """Rule names listed under `localrules:` (snakefmt layout, one per line) or marked `localrule: True`."""
    names: set[str] = set()
    for f in [root / "Snakefile", *sorted((root / "rules").glob("*.smk"))]:
        text = f.read_text()
        for block in re.finditer(r"^localrules:[ \t]*(.*?)(?=^\S|\Z)", text, flags=re.M | re.S):
            names |= set(re.findall(r"[A-Za-z_]\w*", block.group(1)))
        for rule in re.finditer(r"^rule (\w+):\n(.*?)(?=^\S|\Z)", text, flags=re.M | re.S):
            if re.search(r"^\s+localrule:\s*True", rule.group(2), flags=re.M):
                names.add(rule.group(1))
    return names


def grouped_rules(root: Path = ROOT) -> set[str]:
    """Rule names whose definition has a `group:` directive."""
    names: set[str] = set()
    for f in [root / "Snakefile", *sorted((root / "rules").glob("*.smk"))]:
        for rule in re.finditer(r"^rule (\w+):\n(.*?)(?=^\S|\Z)", f.read_text(), flags=re.M | re.S):
            if re.search(r"^\s+group:", rule.group(2), flags=re.M):
                names.add(rule.group(1))
    return names


def read_job_lines(workdir: Path) -> tuple[list[dict], list[str]]:
    jobs, missing = [], []
    for log in sorted((workdir / "logs").rglob("*.log")):
        m = None
        with open(log, errors="replace") as fh:
            for _, line in zip(range(20), fh):
                m = JOB_LINE.search(line)
                if m:
                    break
        if m is None:
            missing.append(str(log.relative_to(workdir)))
        else:
            jobs.append({**m.groupdict(), "log": str(log.relative_to(workdir))})
    return jobs, missing


def slurm_records(workdir: Path) -> dict[str, dict]:
    """SLURM's view of every job it still remembers (MinJobAge): id -> state, comment, tres-per-job, workdir."""
    fmt = "JobID:|,State:|,Comment:|,tres-per-job:|,WorkDir:|"
    out = subprocess.run(["squeue", "--states=all", "-h", "-O", fmt], capture_output=True, text=True, check=True)
    recs = {}
    for line in out.stdout.splitlines():
        jid, state, comment, tres, wd = (line.split("|") + [""] * 5)[:5]
        recs[jid.strip()] = {"state": state.strip(), "comment": comment.strip(), "gres": tres, "workdir": wd.strip()}
    return {j: r for j, r in recs.items() if r["workdir"] and Path(r["workdir"]).resolve() == workdir.resolve()}


def plugin_logs(workdir: Path) -> dict[str, str]:
    """SLURM job id -> rule (or `group_<group job name>`), from the plugin's
    .snakemake/slurm_logs/{rule_<rule>,group_<name>}/**/<jobid>.log."""
    found = {}
    for pattern in ("rule_*/**/*.log", "group_*/**/*.log"):
        for f in (workdir / ".snakemake" / "slurm_logs").glob(pattern):
            if f.stem.isdigit():
                top = f.relative_to(workdir / ".snakemake" / "slurm_logs").parts[0]
                found[f.stem] = top[len("rule_") :] if top.startswith("rule_") else top
    return found


def check(workdir: Path, expect_gpu: bool) -> list[str]:
    errors: list[str] = []
    local = local_rules()
    grouped = grouped_rules()
    jobs, missing = read_job_lines(workdir)
    if not jobs:
        return [f"no job logs under {workdir / 'logs'}"]
    errors += [f"{log}: no 'job rule=...' line (script not wrapped in layergeom.workflow.job?)" for log in missing]
    records = slurm_records(workdir)
    plogs = plugin_logs(workdir)
    seen: Counter[str] = Counter()
    group_ids: dict[tuple[str, str], set[str]] = defaultdict(set)  # (rule, log folder) -> SLURM ids
    table: dict[str, Counter] = defaultdict(Counter)
    for j in jobs:
        rule, sid, cuda = j["rule"], j["slurm"], j["cuda"]
        row = table[rule]
        row["jobs"] += 1
        if rule in local:
            row["local"] += 1
            if sid != "none":
                errors.append(f"{j['log']}: local rule {rule} ran inside SLURM job {sid}")
            continue
        if not sid.isdigit():
            errors.append(f"{j['log']}: {rule} did not run under SLURM (slurm_job_id={sid})")
            continue
        seen[sid] += 1
        row["slurm"] += 1
        if rule in grouped:
            group_ids[(rule, str(Path(j["log"]).parent))].add(sid)
        rec = records.get(sid)
        if rec is None:
            errors.append(f"{j['log']}: SLURM has no record of job {sid} from {workdir} (MinJobAge too short?)")
            continue
        if rec["state"] != "COMPLETED":
            errors.append(f"{j['log']}: SLURM job {sid} is {rec['state']}")
        if rule in grouped:  # the group job's name: <group id>_<its rules>
            if not (rec["comment"].startswith("rule_") and rec["comment"].endswith(f"_{rule}")):
                errors.append(f"{j['log']}: SLURM job {sid} was submitted for '{rec['comment']}', not a {rule} group")
            if not (plogs.get(sid, "").startswith("group_") and plogs[sid].endswith(f"_{rule}")):
                errors.append(f"{j['log']}: no .snakemake/slurm_logs/group_*_{rule}/**/{sid}.log")
        else:
            if rec["comment"] != f"rule_{rule}" and not rec["comment"].startswith(f"rule_{rule}_wildcards_"):
                errors.append(f"{j['log']}: SLURM job {sid} was submitted for '{rec['comment']}', not rule {rule}")
            if plogs.get(sid) != rule:
                errors.append(f"{j['log']}: no .snakemake/slurm_logs/rule_{rule}/**/{sid}.log")
        asked_gpu = "gpu" in rec["gres"]
        if asked_gpu:
            row["gpu"] += 1
            if cuda == "none":
                errors.append(f"{j['log']}: SLURM job {sid} was given a GPU but CUDA_VISIBLE_DEVICES is unset")
        elif cuda != "none":
            errors.append(f"{j['log']}: SLURM job {sid} asked for no GPU but saw CUDA_VISIBLE_DEVICES={cuda}")
    owners: dict[str, list[str]] = defaultdict(list)
    for (rule, folder), sids in sorted(group_ids.items()):
        if len(sids) != 1:
            errors.append(
                f"{folder}: the {rule} jobs ran in {len(sids)} SLURM jobs ({', '.join(sorted(sids))}), not one"
            )
        for sid in sids:
            owners[sid].append(folder)
    errors += [f"SLURM job {sid} ran the groups of {', '.join(f)}" for sid, f in owners.items() if len(f) > 1]
    errors += [f"SLURM job {sid} is named in {n} job logs" for sid, n in seen.items() if n > 1 and sid not in owners]
    extra = sorted(set(records) - set(seen), key=int)
    if extra:
        errors.append(f"SLURM ran jobs from {workdir} that no job log names: {', '.join(extra)}")
    n_gpu = sum(r["gpu"] for r in table.values())
    if expect_gpu and n_gpu == 0:
        errors.append("no job asked SLURM for a GPU (run with --config device=auto)")

    n_groups = {rule: len({f for (r, f) in group_ids if r == rule}) for rule in grouped}
    print(f"grouped: {', '.join(f'{r} in {n} SLURM job(s)' for r, n in sorted(n_groups.items()) if n) or 'none'}")
    print(f"{'rule':32} {'jobs':>5} {'local':>6} {'slurm':>6} {'gpu':>4}")
    for rule in sorted(table):
        r = table[rule]
        print(f"{rule:32} {r['jobs']:5d} {r['local']:6d} {r['slurm']:6d} {r['gpu']:4d}")
    tot = sum(table.values(), Counter())
    print(f"{'all':32} {tot['jobs']:5d} {tot['local']:6d} {tot['slurm']:6d} {tot['gpu']:4d}")
    return errors


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("workdir", type=Path)
    ap.add_argument("--expect-gpu", action="store_true")
    args = ap.parse_args(argv)
    errors = check(args.workdir, args.expect_gpu)
    for e in errors:
        print(f"FAIL: {e}")
    if not errors:
        print("OK: every non-local job ran in its own SLURM job (grouped fits: one per model and checkpoint);")
        print("    GPU jobs saw CUDA_VISIBLE_DEVICES")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
