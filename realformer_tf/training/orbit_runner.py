"""The adapter between `training.trainer.Trainer` and orbit's loop (orbit.Controller
calls the runner's train/eval steps inside one compiled `tf.while_loop` per
`steps_per_loop`), and which of orbit's messages reach stdout."""

import contextlib
import io
import sys

import orbit


class _OrbitStdout(io.TextIOBase):
    """stdout less orbit's loop messages. orbit logs each message (absl's log keeps them
    all) and also prints it: every loop's output dict over several lines, which the
    progress line (`monitoring.ProgressAction`) says in one. Of orbit's messages those
    about checkpoints ("saved checkpoint ...", "restored ...") pass; everything that is
    not orbit's passes unchanged."""

    DROPPED = ("train | step:", " eval | step:", "restoring ")

    def __init__(self, stream):
        super().__init__()
        self._stream = stream
        self._dropped_last = False

    def write(self, text):
        if self._dropped_last and text == "\n":  # print's line end after a dropped message
            self._dropped_last = False
            return len(text)
        self._dropped_last = text.startswith(self.DROPPED)
        if not self._dropped_last:
            self._stream.write(text)
        return len(text)

    def flush(self):
        self._stream.flush()


@contextlib.contextmanager
def orbit_messages_filtered():
    """Inside: what orbit prints to stdout, less its loop messages (`_OrbitStdout`)."""
    with contextlib.redirect_stdout(_OrbitStdout(sys.stdout)):
        yield


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
