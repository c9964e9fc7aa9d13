"""Learning curves of this package's `run_pretraining.py` next to an independent
implementation (the peer), trained on the same TFRecords with the same settings and
data order, and evaluated on the same held-out records at the same steps through the
same NumPy code. Each seed sets the initial weights and the data order (the package's
own input pipeline, which the peer reads as NumPy batches).

The peer depends on `Settings.variant`:

- "bert" (vanilla post-LN BERT): Hugging Face `transformers`' `BertForPreTraining`
  (`peer_bert`), from the very same initial weights (one original-named
  checkpoint, written as a Hugging Face folder too);
- "normformer": x-transformers' encoder with its NormFormer options
  (`peer_xtransformers`), from its own initialization under the same seed
  ("x-transformers"), and the same model initialized as BERT is
  ("x-transformers-bert-init": every weight truncated normal with sd 0.02, biases 0),
  which separates what the initialization does from what the architecture does.

    results = compare(settings, seeds=(1, 2, 3), output_dir="experiments/results/compare")
    print(report_markdown(results))
"""

import dataclasses
import json
import os
import time

import numpy as np

from experiments.study import peer_bert
from realformer_tf.fileio import atomic_output

# The peers of each variant the comparison supports; the first is the variant's main peer.
PEERS = {"bert": ("transformers",), "normformer": ("x-transformers", "x-transformers-bert-init")}


@dataclasses.dataclass(frozen=True)
class Settings:
    """One comparison: the data, the model and the recipe (run_pretraining.py's flag
    names where it has them)."""

    train_file: str
    eval_file: str
    vocab_size: int
    max_seq_length: int = 64
    max_predictions_per_seq: int = 10
    hidden_size: int = 64
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    intermediate_size: int = 256
    dropout: float = 0.0
    train_batch_size: int = 32
    learning_rate: float = 1e-3
    num_train_steps: int = 6000
    num_warmup_steps: int = 600
    weight_decay: float = 0.01
    eval_every: int = 500
    eval_batch_size: int = 64
    max_eval_steps: int = 20
    threads: int = 0  # 0: each library's default
    variant: str = "bert"  # a key of PEERS

    def __post_init__(self):
        if self.variant not in PEERS:
            raise ValueError(f"variant {self.variant!r}: the comparison has a peer for {', '.join(PEERS)}")
        if self.variant == "normformer":  # refused here, before either side trains
            from experiments.study import peer_xtransformers

            peer_xtransformers.check_sizes(self.hidden_size, self.intermediate_size)

    @property
    def peer(self):
        """The main peer's side name."""
        return PEERS[self.variant][0]

    @property
    def sides(self):
        return ("ours", *PEERS[self.variant])

    def bert_config(self):
        from realformer_tf.models import variants

        return variants.variant_config(
            self.variant, vocab_size=self.vocab_size, hidden_size=self.hidden_size,
            num_hidden_layers=self.num_hidden_layers, num_attention_heads=self.num_attention_heads,
            intermediate_size=self.intermediate_size, hidden_dropout_prob=self.dropout,
            attention_probs_dropout_prob=self.dropout, max_position_embeddings=max(self.max_seq_length, 64),
            type_vocab_size=2)

    def peer_sizes(self):
        return dict(vocab_size=self.vocab_size, hidden_size=self.hidden_size, num_layers=self.num_hidden_layers,
                    num_heads=self.num_attention_heads, intermediate_size=self.intermediate_size,
                    max_seq_length=self.max_seq_length)

    def eval_steps(self):
        return list(range(0, self.num_train_steps + 1, self.eval_every))


# -- what both sides share -----------------------------------------------------------------
def initial_weights(settings, seed, work_dir):
    """The seed's initial pretraining model, as an original-named checkpoint (ours) and,
    for vanilla BERT, a Hugging Face folder (the peer's). Returns (checkpoint prefix,
    folder or None)."""
    from realformer_tf.checkpoints import bert as bert_checkpoint
    from realformer_tf.models.bert.model import BertPretrainingModel
    from realformer_tf.training.distribution import run_settings

    with run_settings(seed, "none"):
        model = BertPretrainingModel(settings.bert_config())
        bert_checkpoint.bert_variables(model)  # builds the weights from the seed
    prefix = bert_checkpoint.save_bert_checkpoint(model, os.path.join(work_dir, "init", "bert_model.ckpt"))
    # Only transformers' peer starts from these weights (x-transformers has its own layout).
    folder = (bert_checkpoint.save_hf_folder(model, os.path.join(work_dir, "init_hf"))
              if settings.variant == "bert" else None)
    return prefix, folder


def eval_batches(settings):
    """The held-out batches both sides are evaluated on (NumPy dicts, in file order)."""
    from realformer_tf.data import pretraining

    files = pretraining.check_files(settings.eval_file, settings.max_seq_length, settings.max_predictions_per_seq)
    dataset = pretraining.make_dataset_fn(files, settings.max_seq_length, settings.max_predictions_per_seq,
                                          settings.eval_batch_size, is_training=False,
                                          max_steps=settings.max_eval_steps)(None)
    return [{k: v.numpy() for k, v in batch.items()} for batch in dataset]


def evaluate(logits_fn, batches):
    """Held-out (masked-LM accuracy, loss) of `logits_fn(batch) -> [B, P, V]`, weighted
    over all real predictions of all batches."""
    sums = np.zeros(3)
    for batch in batches:
        accuracy, loss, weight = peer_bert.masked_lm_metrics(
            logits_fn(batch), batch["masked_lm_ids"], batch["masked_lm_weights"])
        sums += (accuracy * weight, loss * weight, weight)
    return sums[0] / sums[2], sums[1] / sums[2]


def train_batches(settings, seed):
    """The training batches in the order `run_pretraining.py --seed=seed` reads them
    (its input pipeline under the seed it sets), as NumPy dicts."""
    from realformer_tf.data import pretraining
    from realformer_tf.training.distribution import run_settings

    files = pretraining.check_files(settings.train_file, settings.max_seq_length, settings.max_predictions_per_seq)
    with run_settings(seed, "none"):
        dataset = pretraining.make_dataset_fn(files, settings.max_seq_length, settings.max_predictions_per_seq,
                                              settings.train_batch_size, is_training=True, seed=seed)(None)
    for batch in dataset:
        yield {k: v.numpy() for k, v in batch.items()}


# -- the two sides -------------------------------------------------------------------------
def run_ours(settings, seed, init_checkpoint, work_dir, batches, log=print):
    """Trains with run_pretraining.py (in-process), keeping a checkpoint at every
    evaluation step; returns {step: (accuracy, loss)} and the final checkpoint."""
    from realformer_tf.app import run_pretraining

    config_file = os.path.join(work_dir, "bert_config.json")
    settings.bert_config().to_json_file(config_file)
    out = os.path.join(work_dir, "ours")
    status = run_pretraining.main([
        "run_pretraining.py", f"--input_file={settings.train_file}", f"--output_dir={out}",
        f"--bert_config_file={config_file}", f"--init_checkpoint={init_checkpoint}", "--do_train=true",
        f"--max_seq_length={settings.max_seq_length}",
        f"--max_predictions_per_seq={settings.max_predictions_per_seq}",
        f"--train_batch_size={settings.train_batch_size}", f"--learning_rate={settings.learning_rate}",
        f"--num_train_steps={settings.num_train_steps}", f"--num_warmup_steps={settings.num_warmup_steps}",
        f"--weight_decay={settings.weight_decay}", f"--save_checkpoints_steps={settings.eval_every}",
        f"--iterations_per_loop={settings.eval_every}",
        f"--keep_checkpoint_max={len(settings.eval_steps()) + 1}", f"--seed={seed}"])
    if status:
        raise RuntimeError(f"run_pretraining.py stopped with status {status} (its output is above)")
    curve = {}
    for step in settings.eval_steps():
        prefix = init_checkpoint if step == 0 else os.path.join(out, f"ckpt-{step}")
        curve[step] = evaluate(_our_logits_fn(settings, prefix), batches)
        log(f"  ours  seed {seed} step {step}: masked LM accuracy {curve[step][0]:.4f}, loss {curve[step][1]:.4f}")
    return curve, os.path.join(out, "bert_model.ckpt")


def _our_logits_fn(settings, prefix):
    from realformer_tf.checkpoints import bert as bert_checkpoint
    from realformer_tf.models.bert.model import BertPretrainingModel

    model = BertPretrainingModel(settings.bert_config())
    bert_checkpoint.load_bert_checkpoint(model, prefix)
    keys = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions")
    return lambda batch: model({k: batch[k] for k in keys}, training=False)["masked_lm_logits"].numpy()


def make_peer(settings, seed, folder, side=None):
    """The peer `side` (default: the variant's main peer), before training: transformers
    from the Hugging Face `folder` of the shared initial weights, or x-transformers from
    its own initialization (or BERT's) under `seed`."""
    side = side or settings.peer
    recipe = (settings.learning_rate, settings.num_train_steps, settings.num_warmup_steps, settings.weight_decay)
    threads = settings.threads or None
    if side == "transformers":
        return peer_bert.PeerBert(folder, *recipe, threads=threads)
    from experiments.study import peer_xtransformers

    init = "bert" if side == "x-transformers-bert-init" else "own"
    return peer_xtransformers.PeerXNormFormer(settings.peer_sizes(), seed, *recipe, threads=threads, init=init)


def run_peer(settings, seed, folder, batches, log=print, side=None):
    """Trains the peer `side` (default: the main peer) on the same batches in the same
    order; returns ({step: (accuracy, loss)}, the trained peer)."""
    side = side or settings.peer
    peer = make_peer(settings, seed, folder, side)
    steps = set(settings.eval_steps())
    curve = {}
    data = train_batches(settings, seed)
    for step in range(settings.num_train_steps + 1):
        if step in steps:
            curve[step] = evaluate(peer.masked_lm_logits, batches)
            log(f"  {side} seed {seed} step {step}: masked LM accuracy {curve[step][0]:.4f}, "
                f"loss {curve[step][1]:.4f}")
        if step < settings.num_train_steps:
            peer.train_step(next(data))
    return curve, peer


# -- the comparison, resumable -------------------------------------------------------------
def compare(settings, seeds, output_dir, sides=None, log=print):
    """Runs every (side, seed) not yet in `output_dir/compare_pretraining.json` (each is
    saved as it finishes, so a stopped comparison resumes; processes given other `sides`
    or `seeds` can share one `output_dir` at once) and returns the results.
    `sides`: a subset of `settings.sides` (default: all)."""
    from experiments.study.study_stats import plateau_baselines

    sides = settings.sides if sides is None else tuple(sides)

    path = os.path.join(output_dir, "compare_pretraining.json")
    results = _load(path, settings)
    if "baselines" not in results:
        unigram, copy = plateau_baselines(settings.eval_file, settings.max_seq_length,
                                          settings.max_predictions_per_seq)
        results["baselines"] = {"unigram": unigram, "copy_unigram": copy}
    batches = eval_batches(settings)
    for seed in seeds:
        work_dir = os.path.join(output_dir, "runs", f"seed{seed}")
        missing = [side for side in sides if str(seed) not in results["runs"].get(side, {})]
        if not missing:
            continue
        # The shared initial weights, where a side starts from them (x-transformers does not).
        init_checkpoint, folder = (initial_weights(settings, seed, work_dir)
                                   if "ours" in missing or "transformers" in missing else (None, None))
        for side in missing:
            log(f"{side}, seed {seed}: {settings.num_train_steps} steps")
            start = time.time()
            if side == "ours":
                curve, _ = run_ours(settings, seed, init_checkpoint, work_dir, batches, log)
            else:
                curve, _ = run_peer(settings, seed, folder, batches, log, side=side)
            results["runs"].setdefault(side, {})[str(seed)] = {
                "steps": sorted(curve), "accuracy": [curve[s][0] for s in sorted(curve)],
                "loss": [curve[s][1] for s in sorted(curve)], "seconds": time.time() - start}
            results = _save(path, results, settings)
    return results


def _recorded_settings(settings):
    """The settings as a results file keeps them: the record files by name, not by the
    path of the machine that ran them (the files are shared with other people)."""
    recorded = dataclasses.asdict(settings)
    for key in ("train_file", "eval_file"):
        recorded[key] = os.path.basename(recorded[key])
    return recorded


def _load(path, settings):
    settings_dict = _recorded_settings(settings)
    if os.path.exists(path):
        with open(path) as f:
            results = json.load(f)
        if {"variant": "bert", **results.get("settings", {})} == settings_dict:  # files from before `variant`
            return results
        raise ValueError(f"{path} holds a comparison with other settings; give another --output_dir "
                         "or remove it")
    return {"settings": settings_dict, "runs": {}}


def _save(path, results, settings):
    """Adds the runs of `results` to the file at `path` (under a lock, so that processes
    running other sides or seeds of the same comparison at once keep each other's runs)
    and returns what the file then holds."""
    import fcntl

    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        saved = _load(path, settings)
        for side, runs in results["runs"].items():
            saved["runs"].setdefault(side, {}).update(runs)
        saved.setdefault("baselines", results["baselines"])
        with atomic_output(path) as f:
            f.write(json.dumps(saved, indent=1, sort_keys=True) + "\n")
    return saved


# -- the report ----------------------------------------------------------------------------
def peers_of(results):
    """The peer sides `results` reports: the variant's main peer, and its other peers
    that have runs (files from before `variant` are BERT's)."""
    main, *others = PEERS[results["settings"].get("variant", "bert")]
    return [main] + [side for side in others if results["runs"].get(side)]


def curves(results, side, metric):
    """(steps, [seeds x steps] array) of one side's metric."""
    runs = results["runs"].get(side, {})
    if not runs:
        return [], np.zeros((0, 0))
    steps = next(iter(runs.values()))["steps"]
    return steps, np.array([run[metric] for _, run in sorted(runs.items())])


def _mean_sd(values):
    sd = float(values.std(ddof=1)) if len(values) > 1 else float("nan")
    return float(values.mean()), sd


def _cell(mean, sd):
    return f"{mean:.4f}" if np.isnan(sd) else f"{mean:.4f} ± {sd:.4f}"


def _difference(difference, sd_ours, n_ours, sd_peer, n_peer):
    two_se = 2 * np.sqrt(sd_ours ** 2 / n_ours + sd_peer ** 2 / n_peer)
    if np.isnan(two_se):
        return f"{difference:+.4f}"
    return f"{difference:+.4f} ({two_se:.4f}){'*' if abs(difference) > two_se else ''}"


def report_markdown(results):
    """One table per peer: per evaluated step, each side's mean ± sd over seeds of
    held-out masked-LM accuracy and loss, and ours minus the peer with twice its standard
    error over seeds (Welch's: a difference inside it is within the seed spread)."""
    base = results["baselines"]
    peers = peers_of(results)
    counts = ", ".join(f"{side}: {len(results['runs'].get(side, {}))}" for side in ("ours", *peers))
    lines = [f"Held-out masked-LM accuracy / loss, mean ± sd over seeds ({counts} seeds). "
             f"Context-free baselines: unigram {base['unigram']:.3f}, copy + unigram {base['copy_unigram']:.3f}.",
             "A difference is ours minus the peer, with 2 standard errors over seeds in brackets; "
             "`*` marks one outside them."]
    tables = [_peer_table(results, peer) for peer in peers]
    if tables[0] is None:
        return "\n".join(lines[:1] + ["", "(both sides are needed for the table)"])
    return "\n".join(lines + [line for table in tables if table for line in ["", *table]]) + "\n"


def _peer_table(results, peer):
    """The markdown lines of ours against `peer`, or None where either has no runs."""
    steps, ours_acc = curves(results, "ours", "accuracy")
    _, peer_acc = curves(results, peer, "accuracy")
    if not ours_acc.size or not peer_acc.size:
        return None
    _, ours_loss = curves(results, "ours", "loss")
    _, peer_loss = curves(results, peer, "loss")
    lines = [f"| step | ours accuracy | {peer} accuracy | difference | ours loss | {peer} loss | difference |",
             "|---|---|---|---|---|---|---|"]
    for i, step in enumerate(steps):
        cells = [str(step)]
        for ours, other in ((ours_acc[:, i], peer_acc[:, i]), (ours_loss[:, i], peer_loss[:, i])):
            (om, osd), (pm, psd) = _mean_sd(ours), _mean_sd(other)
            cells += [_cell(om, osd), _cell(pm, psd), _difference(om - pm, osd, len(ours), psd, len(other))]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def plot(results, path):
    """Both sides' learning curves (mean, with the seeds' range) and the baselines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, metric in zip(axes, ("accuracy", "loss")):
        for side, color in zip(("ours", *peers_of(results)), ("tab:blue", "tab:orange", "tab:green")):
            steps, values = curves(results, side, metric)
            if values.size:
                ax.plot(steps, values.mean(0), color=color, label=side)
                ax.fill_between(steps, values.min(0), values.max(0), color=color, alpha=0.2)
        if metric == "accuracy":
            ax.axhline(results["baselines"]["unigram"], color="gray", linestyle=":", label="unigram")
            ax.axhline(results["baselines"]["copy_unigram"], color="gray", linestyle="--", label="copy + unigram")
        ax.set_xlabel("step")
        ax.set_ylabel(f"held-out masked-LM {metric}")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
