"""The TPU smoke check (tpu_smoke_check.py) runs on the CPU too: tiny variants,
checkpoints under a ram:// output_dir (TensorFlow's in-memory file system, standing in
for gs://), and a report that says what was checked."""

import re

import numpy as np
import pytest
import tensorflow as tf

import helpers_data as h
from realformer_tf.jobs import smoke_check

TINY = smoke_check.Size(hidden_size=16, num_layers=1, num_heads=2, seq_length=24, max_predictions=3,
                        batch_size=2, vocab_size=40, etc_tokens_per_global=8)


@pytest.mark.slow
def test_smoke_check_on_cpu_reports_every_requested_variant():
    lines = []
    # Two variants (every variant's step is compiled in test_compiled_step.py).
    results = smoke_check.run(tf.distribute.get_strategy(), "ram://smoke", ["realformer_normformer", "pre_ln"],
                              TINY, steps=2, print_fn=lines.append)
    report = "\n".join(lines)
    assert [r.name for r in results] == ["realformer_normformer", "pre_ln"] and all(r.ok for r in results), report
    assert "devices: 1 x CPU on this machine" in report
    assert "step compiled with XLA (jit_compile)" in report
    assert "mixed precision bfloat16" in report
    for r in results:
        row = next(line for line in lines if line.startswith(r.name + " "))
        compile_s, steps_per_s, first, last = (float(x) for x in re.findall(r"-?\d+\.\d+", row)[:4])
        assert compile_s > 0 and steps_per_s > 0, row
        # Random weights, a vocabulary of 40: the masked-LM + next-sentence loss starts
        # near ln(40) + ln(2).
        assert abs(first - (np.log(40) + np.log(2))) < 1.0, row
        assert "ckpt-3 restored OK" in row, row
    assert lines[-1].startswith("OK: 2 of 2 variants"), report
    assert not tf.io.gfile.glob("ram://smoke/smoke_check-*")  # removed once everything passed
    assert tf.keras.mixed_precision.global_policy().name == "float32"  # the caller's policy is back


def test_a_failing_variant_is_reported_and_the_others_still_run(monkeypatch, capsys):
    def check(name, strategy, size, steps, run_dir):
        if name == "pre_ln":
            raise RuntimeError("no kernel for this op\nsecond line")
        return smoke_check.VariantResult(name, "", 1.5, 10.0, 7.1, 7.0, "ckpt-6 restored OK")

    monkeypatch.setattr(smoke_check, "check_variant", check)
    lines = []
    results = smoke_check.run(tf.distribute.get_strategy(), "ram://smoke_failing", ["realformer", "pre_ln", "etc"],
                              TINY, print_fn=lines.append)
    assert [r.ok for r in results] == [True, False, True]
    assert f"{'pre_ln':<{smoke_check.NAME_WIDTH}} FAILED: RuntimeError: no kernel for this op" in lines
    assert any(line.startswith("realformer ") and "ckpt-6 restored OK" in line for line in lines)
    assert lines[-1].startswith("FAILED: 2 of 3 variants")
    assert "Traceback" in capsys.readouterr().err  # the details, for a bug report


def test_unknown_variant_is_a_flag_error():
    proc = h.run_script("tpu_smoke_check.py", "--output_dir=ram://x", "--variants=realformer,vanilla", timeout=300)
    assert proc.returncode == 1
    assert "--variants takes names from: bert, realformer, realformer_mean, pre_ln" in proc.stderr
    assert "Traceback" not in proc.stderr
