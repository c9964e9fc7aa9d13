"""realformer_tf_launch: the console scripts' entry. A program whose outputs are all
committed when main() returns ends without Python's teardown; the others exit as usual."""

import sys

import pytest

import realformer_tf_launch as launch


class EndedNow(Exception):
    """os._exit, as the test sees it (it does not return either)."""


@pytest.fixture
def exits(monkeypatch):
    recorded = []

    def end(status):
        recorded.append(status)
        raise EndedNow

    monkeypatch.setattr(launch, "_prepare_process", lambda: None)  # the test process is prepared already
    monkeypatch.setattr(launch.os, "_exit", end)
    return recorded


def test_create_pretraining_data_ends_without_teardown_with_its_status(exits, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["create_pretraining_data.py", "--help"])
    with pytest.raises(EndedNow):
        launch.run("create_pretraining_data")
    assert exits == [0] and "--num_output_shards" in capsys.readouterr().out
    monkeypatch.setattr(sys, "argv", ["create_pretraining_data.py", "--input_file=x"])  # required flags missing
    with pytest.raises(EndedNow):
        launch.run("create_pretraining_data")
    assert exits == [0, 1] and capsys.readouterr().err.startswith("error:")


def test_other_programs_exit_as_usual(exits, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["run_classifier.py", "--help"])
    with pytest.raises(SystemExit) as e:
        launch.run("run_classifier")
    assert e.value.code == 0 and exits == [] and "--task_name" in capsys.readouterr().out
