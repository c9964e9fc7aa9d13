"""The grid of pretraining runs behind experiments/reproduce.py: the papers' variants
(named in `realformer_tf.models.variants`: post-LN BERT, Pre-LN, RealFormer, RealFormer
running mean, NormFormer, RealFormer + NormFormer) at several depths and seeds, plus a
learning-rate sweep (the RealFormer paper's Table 2 and Table 6, NormFormer's stability
claim).

A `Budget` defines the grid and `plan_runs` lists its `Run`s; `share_of` splits the runs
among parallel worker processes. `experiments.study.reproduction` trains them and
`experiments.study.study_report` writes the report.
"""

import dataclasses
import math

from realformer_tf.models import variants as variants_lib

# The variants a study trains by default ("all"), in the report's order.
STUDY_VARIANTS = ("bert", "pre_ln", "realformer", "realformer_mean", "normformer", "realformer_normformer")

MODEL_PRESETS = {
    "tiny": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64),
    "narrow": dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=256),
    "mini": dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, intermediate_size=512),
    "small": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024),
}


@dataclasses.dataclass(frozen=True)
class Budget:
    """Everything a preset fixes; reproduce.py's flags override single fields.

    The grid it defines: every variant at every depth in `depths` (empty: the model
    preset's) with every seed in `seeds`, `num_train_steps` at `learning_rate`; and the
    learning-rate sweep: the probe variants at the first depth, at `learning_rate` and
    each of `sweep_learning_rates`, `sweep_train_steps` each (0: num_train_steps), with
    the seeds in `sweep_seeds` (empty: `seeds`). A sweep run identical to a depth run is
    trained once."""

    model: str
    num_train_steps: int
    train_batch_size: int
    num_warmup_steps: int
    learning_rate: float
    eval_batch_size: int
    max_eval_steps: int
    iterations_per_loop: int
    save_checkpoints_steps: int
    analysis_examples: int
    max_seq_length: int
    max_predictions_per_seq: int
    sweep_learning_rates: tuple = ()
    sweep_train_steps: int = 0
    sweep_warmup_steps: int = 0
    depths: tuple = ()
    seeds: tuple = (1,)
    sweep_seeds: tuple = ()
    dropout: float = 0.1
    note: str = ""

    @property
    def layer_counts(self):
        return tuple(self.depths) or (MODEL_PRESETS[self.model]["num_hidden_layers"],)


BUDGETS = {
    # Seconds per run: for the tests and for trying the pipeline.
    "toy": Budget(model="tiny", num_train_steps=5, train_batch_size=8, num_warmup_steps=1,
                  learning_rate=1e-3, sweep_learning_rates=(1e-2,), eval_batch_size=8, max_eval_steps=2,
                  iterations_per_loop=1, save_checkpoints_steps=5, analysis_examples=8,
                  max_seq_length=32, max_predictions_per_seq=5,
                  note="plumbing only; the numbers mean nothing"),
    # All 12 runs (6 variants x 2 learning rates) in about 40 minutes on 2 CPU cores; see
    # experiments/reproduce.py for the measurement this is sized from.
    "small": Budget(model="small", num_train_steps=180, train_batch_size=16, num_warmup_steps=18,
                    learning_rate=5e-4, sweep_learning_rates=(2e-3,), eval_batch_size=32, max_eval_steps=8,
                    iterations_per_loop=10, save_checkpoints_steps=60, analysis_examples=256,
                    max_seq_length=128, max_predictions_per_seq=20,
                    note="a few minutes of training per run: shows early-training trends only"),
    # The seeded study (experiments/README.md): deep-and-narrow models, 2 depths x 6
    # variants x 3 seeds, and a 4-point learning-rate sweep x 2 seeds. The steps and
    # learning rate are the pilot's (docs/study.md): the first setting at which Post-LN
    # BERT at 4 layers leaves the context-free plateau (held-out accuracy >= copy +
    # unigram + 0.10). Sized from measured run times: about 5 hours
    # on 2 CPU cores (2 single-threaded workers).
    "study": Budget(model="narrow", num_train_steps=6000, train_batch_size=32, num_warmup_steps=600,
                    learning_rate=3e-3, sweep_learning_rates=(1e-3, 1e-2, 3e-2), sweep_train_steps=3000,
                    sweep_warmup_steps=300, depths=(4, 12), seeds=(1, 2, 3), sweep_seeds=(1, 2),
                    dropout=0.0, eval_batch_size=64, max_eval_steps=0, iterations_per_loop=100,
                    save_checkpoints_steps=500, analysis_examples=512, max_seq_length=64,
                    max_predictions_per_seq=10,
                    note="deep-and-narrow models, 3 seeds, and a learning-rate sweep"),
}


@dataclasses.dataclass(frozen=True)
class Run:
    """One pretraining run of the grid: everything that differs between runs."""

    variant: str
    learning_rate: float
    seed: int
    layers: int
    steps: int
    warmup: int

    @property
    def name(self):
        return f"{self.variant}_L{self.layers}_lr{format_lr(self.learning_rate)}_s{self.seed}_n{self.steps}"

    @property
    def cost(self):
        """Relative compute (steps x layers): for sharing runs among workers and the ETA."""
        return self.steps * self.layers


    @property
    def legacy_names(self):
        """The names this run had under the variant's old names (e.g. post_L4_...), to
        find the run folders of a study started before the names were unified."""
        variant = variants_lib.get_variant(self.variant)
        return [self.name.replace(self.variant, alias, 1) for alias in variant.aliases]


def title(variant):
    """The variant's label in tables and plots."""
    return variants_lib.get_variant(variant).title


def model_config(variant, preset, vocab_size, max_seq_length, layers=0, dropout=0.1):
    """The bert_config dict of `variant` at size `preset` (`layers`: a depth other than
    the preset's)."""
    config = dict(
        vocab_size=int(vocab_size), hidden_act="gelu", hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout, max_position_embeddings=max(int(max_seq_length), 16),
        type_vocab_size=2, initializer_range=0.02,
    )
    config.update(MODEL_PRESETS[preset])
    if layers:
        config["num_hidden_layers"] = int(layers)
    return variants_lib.apply_variant(config, variant)


def plan_runs(budget, variants, probe_variants):
    """The grid's runs, seed by seed (a study stopped early holds whole seeds), each once."""
    sweep_seeds = budget.sweep_seeds or budget.seeds
    sweep_lrs = (budget.learning_rate,) + tuple(budget.sweep_learning_rates)
    runs = []
    for seed in budget.seeds:
        for layers in budget.layer_counts:
            runs += [Run(v, budget.learning_rate, seed, layers, budget.num_train_steps,
                         budget.num_warmup_steps) for v in variants]
        if seed in sweep_seeds and budget.sweep_learning_rates:
            steps = budget.sweep_train_steps or budget.num_train_steps
            warmup = budget.sweep_warmup_steps or budget.num_warmup_steps
            runs += [Run(v, lr, seed, budget.layer_counts[0], steps, warmup)
                     for lr in sweep_lrs for v in probe_variants]
    return list(dict.fromkeys(runs))


def share_of(runs, worker, workers):
    """The runs worker `worker` of `workers` trains: longest first to the least loaded
    worker. A fixed function of the plan, so the workers agree without talking."""
    loads, shares = [0] * workers, [[] for _ in range(workers)]
    for run in sorted(runs, key=lambda r: -r.cost):
        w = loads.index(min(loads))
        loads[w] += run.cost
        shares[w].append(run)
    order = {run: i for i, run in enumerate(runs)}
    return sorted(shares[worker], key=order.get)


def parse_variants(text):
    """Comma-separated variant names (`realformer_tf.models.variants`), or "all" (the
    study's six, `STUDY_VARIANTS`) -> list of names; UsageError for an unknown one."""
    if [v.strip() for v in text.split(",") if v.strip()] == ["all"]:
        return list(STUDY_VARIANTS)
    return variants_lib.parse_names(text, allow_all=False)


def canonical_names(names):
    """Variant names read from a study's files, old names (post, pre) mapped to the
    current ones."""
    return [variants_lib.canonical_name(n) for n in names]


def format_lr(lr):
    return f"{lr:g}"


def format_seconds(seconds):
    if seconds is None or not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
