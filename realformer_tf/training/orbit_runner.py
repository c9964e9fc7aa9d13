"""The adapter between `training.trainer.Trainer` and orbit's loop (orbit.Controller
calls the runner's train/eval steps inside one compiled `tf.while_loop` per
`steps_per_loop`), and which of orbit's messages reach stdout."""

import orbit
from absl import logging



def _orbit_log(message):
    """orbit prints every loop's output dict (several lines) besides logging it; the
    progress line (`monitoring.ProgressAction`) says the same in one line, so of
    orbit's messages only those about checkpoints reach stdout; all of them stay in
    the absl log."""
    logging.info(message)
    if message.startswith(("saved checkpoint", "restored")):
        print(message, flush=True)


orbit.controller._log = _orbit_log  # a module function orbit looks up on each call


class OrbitRunner(orbit.StandardTrainer, orbit.StandardEvaluator):
    """orbit's StandardTrainer/StandardEvaluator over a `Trainer`: one train step is
    one optimizer step (the next gradient_accumulation_steps batches); the metrics are
    `MetricAccumulator`s the trainer makes."""

    def __init__(self, trainer, train_dataset, eval_dataset):
        self._t = trainer
        self.train_metrics = None
        self.eval_metrics = None
        if train_dataset is not None:
            orbit.StandardTrainer.__init__(self, train_dataset)
        if eval_dataset is not None:
            orbit.StandardEvaluator.__init__(self, eval_dataset)

    # -- training ---------------------------------------------------------------------
    def train_loop_begin(self):
        if self.train_metrics is None:
            self.train_metrics = self._t.new_accumulator()
        self.train_metrics.reset()

    def train_step(self, iterator):
        # One optimizer step: the next gradient_accumulation_steps batches.
        batches = tuple(next(iterator) for _ in range(self._t.gradient_accumulation_steps))
        self.train_metrics.add(self._t.strategy, self._t.strategy.run(self._t.replica_train_step, (batches,)))

    def train_loop_end(self):
        values = self.train_metrics.means(self._t.task.loss_terms)
        values["learning_rate"] = float(self._t.current_learning_rate())
        return values

    # -- evaluation -------------------------------------------------------------------
    def eval_begin(self):
        if self.eval_metrics is None:
            self.eval_metrics = self._t.new_accumulator()
        self.eval_metrics.reset()

    def eval_step(self, iterator):
        self.eval_metrics.add(self._t.strategy, self._t.strategy.run(self._t.eval_step_fn, (next(iterator),)))

    def eval_end(self):
        return self.eval_metrics.means(self._t.task.loss_terms)
