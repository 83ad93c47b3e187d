"""The two papers' claims that the claims table reads (docs/methods.md, "Claims"): id, statement, statistic.

One entry per claim, in the table's order. Statements and statistics are templates filled with the job's
settings (the configured thresholds), so the table says exactly what was tested. ``paper_value`` is the
paper's own number where it gives one (text: some are sequences). Importable without numpy or pandas.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Claim:
    id: str
    paper: str  # A or B
    statement: str  # one sentence; {placeholders} from the settings
    statistic: str
    paper_value: str = ""
    scope: str = "checkpoint"  # checkpoint (every checkpoint), pair (each trained checkpoint against the null), axis
    # (the model's checkpoint axis: the last against the null), null (the null model only)


_A1 = ("the update u is closer in direction to its tokenwise part t than to the residual r ({convention} "
       "convention): almost aligned with t, weakly aligned with r")  # fmt: skip
_A1_STAT = "median over layers of mean_anchors(|cos(u, t)| − |cos(u, r)|), {convention} convention"

CLAIMS: tuple[Claim, ...] = (
    Claim("A1.tokenwise_aligned", "A", _A1.format(convention="delta"), _A1_STAT.format(convention="delta"),
          "|cos(u, t)| near 1, |cos(u, r)| weak"),
    Claim("A1.tokenwise_aligned_abs", "A", _A1.format(convention="absolute"), _A1_STAT.format(convention="absolute"),
          "|cos(u, t)| near 1, |cos(u, r)| weak"),
    Claim("A2.residual_angle", "A", "the residual is weakly aligned with the update: its angle exceeds "
          "{residual_angle_deg}° on most layers", "median over layers of the mean angle between u and r (degrees, "
          "delta convention)", "often > 60°"),
    Claim("A3.residual_projects_less", "A", "the residual projects less onto the dominant tokenwise subspace "
          "than the full update", "median over layers of mean_anchors(π(u) − π(r)) (delta convention, k = proj_k)",
          "far less"),
    Claim("A4.rho_relerr_kl", "A", "the residual predicts the function: Spearman ρ(RelErr, KL) exceeds "
          "{rho_threshold}", "ρ(RelErr, KL) pooled over layers (tokenwise/pooled.tsv)",
          "often > 0.7, up to 0.95"),
    Claim("A5.expressive_smaller_residual", "A", "a more expressive class (mlp) leaves a smaller residual than "
          "this class", "median over layers of mean_anchors(RelErr(class) − RelErr(mlp))"),
    Claim("A5.expressive_weaker_rho", "A", "a more expressive class (mlp) has a weaker ρ(RelErr, KL) than this "
          "class", "ρ(RelErr, KL) of mlp against this class's, pooled over layers"),
    Claim("A6.middle_largest_residual", "A", "the middle layers have the largest residuals",
          "mean RelErr of the middle third of the layers − the larger of the first and last thirds'"),
    Claim("B1.rotation_early", "B", "early boundaries are rotation-dominated: most of their non-zero modes are "
          "complex (more than {complex_fraction})", "complex fraction of the non-zero modes, mean over the first "
          "third of the layers (trends.tsv)", "≈ 0.98"),
    Claim("B1.realign_rises", "B", "late boundaries are near-symmetric: self-realignment rises with depth",
          "OLS slope of self-realignment SR_k per unit relative depth (trends.tsv)", "≈ 0.04 → ≈ 0.70"),
    Claim("B2.henrici_falls", "B", "non-normality falls with depth: the Henrici departure decreases",
          "OLS slope of the Henrici departure per unit relative depth (trends.tsv)"),
    Claim("B1.realign_rises_learned", "B", "the rise of self-realignment with depth is learned: steeper after "
          "training than at init, and present", "slope of SR_k, trained against the null model", "flat at init",
          "pair"),
    Claim("B2.henrici_falls_learned", "B", "the fall of the Henrici departure with depth is learned: steeper after "
          "training than at init, and present", "slope of the Henrici departure, trained against the null model",
          "flat at init", "pair"),
    Claim("B3.erank_collapse", "B", "the cumulative effective rank collapses through depth",
          "erank of the cumulative operator at full depth against depth 1 (cumulative.tsv)",
          "≈ 436 → ≈ 7 (Llama-3.1-8B)"),
    Claim("B3.collapse_learned", "B", "the collapse is learned: the full-depth cumulative erank is lower after "
          "training than at init", "full-depth cumulative erank, trained against the null model",
          "collapse after training, not at init", "pair"),
    Claim("B4.schur_dissolves", "B", "Schur surgery at α = 0 (the non-normal part removed) raises the full-depth "
          "cumulative erank, at every eigenvalue order", "full-depth cumulative erank at α = 0 against α = 1, "
          "canonical order with its interval and the range over random orders (schur.tsv)", "≈ 7.1 → ≈ 45.4"),
    Claim("B5.coupling_absent_init", "B", "coupling of boundary nodes to amplification is absent at init",
          "FDR-significant layers (per-layer test) of the null model (coupling.tsv)", "0 at step 0", "null"),
    Claim("B5.coupling_grows", "B", "coupling grows along the checkpoint axis", "FDR-significant layers (per-layer "
          "test) at the last checkpoint against the null model", "0 → 14 → 24 (OLMo-3-7B)", "axis"),
    Claim("B5.coupling_sign_operator", "B", "the coupling's sign follows the operator type: ρ(P, a) > 0 at "
          "near-symmetric boundaries, < 0 at strongly non-normal ones", "mean ρ(P, a) at near-symmetric − at "
          "non-normal boundaries (split at the median Henrici departure; coupling.tsv)",
          "amplified where near-symmetric, de-amplified where non-normal"),
)  # fmt: skip

BY_ID = {c.id: c for c in CLAIMS}


def statement(claim: Claim, thresholds: dict) -> str:
    """The claim's statement with the configured thresholds."""
    return claim.statement.format(**thresholds)
