"""`oxillama run`, `inspect`, `pull --list` and the top-level options, through the argparse entry point
(oxillama.cli.main) and, where the process's streams matter, through a subprocess."""
import json
import logging
import os
import subprocess
import sys

import jsonschema
import pytest

import oxillama
from oxillama import hub
from oxillama.cli import build_parser, main

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(oxillama.__file__)))
TIMING_WORDS = ("load time", "prompt eval time", "tokens per second", "eval time", "time to first token")


def run_cli(*args, tmp_path, stdin=None):
    env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT)
    return subprocess.run([sys.executable, "-m", "oxillama", *args], input=stdin, capture_output=True, text=True,
                          cwd=str(tmp_path), env=env, timeout=300)


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"oxillama {oxillama.__version__}"


def test_every_run_and_chat_option_has_help_and_shows_its_default():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, type(parser._subparsers._group_actions[0])))
    for name in ("run", "chat", "serve"):
        p = sub.choices[name]
        text = p.format_help()
        for action in p._actions:
            if action.dest in ("help",):
                continue
            assert action.help, (name, action.dest)
            if action.option_strings and action.default not in (None, False):
                assert "default" in p._get_formatter()._get_help_string(action), (name, action.dest)
        assert name == "serve" or "(default: 0.8)" in text and "-1: until the end" in text


@pytest.mark.parametrize("n", ["0", "-2"])
def test_max_tokens_zero_or_below_minus_one_is_refused(n, capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", "-n", n, "hi"])
    assert e.value.code == 2
    assert "-1 to generate until" in capsys.readouterr().err


def test_max_tokens_minus_one_runs_to_the_end(smollm2_path, capsys):
    assert main(["run", "-m", smollm2_path, "-c", "64", "-n", "-1", "--temp", "0", "Once upon a time"]) == 0
    assert len(capsys.readouterr().out.strip()) > 0


def test_system_with_raw_is_an_error(smollm2_path, capsys):
    assert main(["run", "-m", smollm2_path, "--raw", "--system", "Be brief.", "hi"]) == 1
    assert "--system" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", "--raw", "--chat", "hi"])


def test_run_chats_by_default_with_a_chat_model(smollm2_path, capsys):
    """A question to the default (chat) model is answered, as `ollama run` does; --raw (or --no-chat)
    completes the text as it is, which for a question is often nothing at all."""
    question = "What is photosynthesis?"
    outs = {}
    for mode in ("default", "--chat", "--raw", "--no-chat"):
        flags = [] if mode == "default" else [mode]
        assert main(["run", "-m", smollm2_path, *flags, "--temp", "0", "-n", "12", question]) == 0
        outs[mode] = capsys.readouterr().out
    assert outs["default"] == outs["--chat"] and outs["default"].startswith("Photosynthesis is")
    assert outs["--raw"] == outs["--no-chat"] != outs["default"]


def test_run_completes_text_by_default_with_a_base_model(gemma3_path, capsys, caplog):
    with caplog.at_level(logging.WARNING, logger="oxillama"):
        assert main(["run", "-m", gemma3_path, "--temp", "0", "-n", "8", "The three primary colors are"]) == 0
    assert capsys.readouterr().out.startswith(" red, ")
    assert not any("no chat template" in r.getMessage() for r in caplog.records)


def test_ctrl_c_stops_run_and_still_prints_the_timings(smollm2_path, tmp_path):
    import signal
    env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT)
    proc = subprocess.Popen([sys.executable, "-m", "oxillama", "run", "-m", smollm2_path, "--raw", "--timings",
                             "-n", "-1", "-c", "2048", "--temp", "1", "--seed", "1", "Once upon a time"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(tmp_path), env=env)
    try:
        assert proc.stdout.read(1)              # the answer has started
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    for w in TIMING_WORDS:
        assert w in err, (w, err)


def test_timings_on_stderr_and_only_the_answer_on_stdout(smollm2_path, tmp_path):
    res = run_cli("run", "-m", smollm2_path, "--raw", "--temp", "0", "-n", "8", "--timings", "The capital of France is",
                  tmp_path=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "Paris" in res.stdout
    assert not any(w in res.stdout for w in TIMING_WORDS)
    for w in TIMING_WORDS:
        assert w in res.stderr, w
    prompt_line = next(line for line in res.stderr.splitlines() if line.startswith("prompt eval time"))
    from oxillama.tokenizer import Tokenizer
    n_prompt = len(Tokenizer.from_gguf(smollm2_path).encode("The capital of France is"))
    assert f"/ {n_prompt:5d} tokens" in prompt_line
    eval_line = next(line for line in res.stderr.splitlines() if line.startswith("eval time"))
    assert "/     8 tokens" in eval_line


def test_verbose_after_the_subcommand_shows_timings(smollm2_path, capsys):
    assert main(["run", "-m", smollm2_path, "--temp", "0", "-n", "4", "-v", "Hello"]) == 0
    err = capsys.readouterr().err
    assert "time to first token" in err


def test_grammar_file(smollm2_path, tmp_path, capsys):
    gbnf = tmp_path / "yesno.gbnf"
    gbnf.write_text('root ::= "yes" | "no"\n')
    assert main(["run", "-m", smollm2_path, "--grammar-file", str(gbnf), "--seed", "3",
                 "Is water wet? Answer yes or no:"]) == 0
    assert capsys.readouterr().out.strip() in ("yes", "no")


SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                           "population": {"type": "integer", "minimum": 0}},
          "required": ["city", "population"], "additionalProperties": False}


@pytest.mark.parametrize("as_file", [False, True])
def test_json_schema(smollm2_path, tmp_path, capsys, as_file):
    value = json.dumps(SCHEMA)
    if as_file:
        (tmp_path / "schema.json").write_text(value)
        value = str(tmp_path / "schema.json")
    assert main(["run", "-m", smollm2_path, "--chat", "--json-schema", value, "--temp", "0", "-n", "60",
                 "Give me a city and its population as JSON."]) == 0
    jsonschema.validate(json.loads(capsys.readouterr().out), SCHEMA)


def test_json_schema_errors(smollm2_path, capsys):
    assert main(["run", "-m", smollm2_path, "--json-schema", "{not json", "hi"]) == 1
    assert "not valid JSON" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", "--json-schema", "{}", "--grammar-file", "g.gbnf", "hi"])


def test_chat_on_a_model_without_template_warns_at_default_verbosity(gemma3_path, caplog):
    with caplog.at_level(logging.WARNING, logger="oxillama"):
        assert main(["run", "-m", gemma3_path, "--chat", "-n", "2", "hi"]) == 0
    assert any("no chat template" in r.getMessage() and "base model" in r.getMessage() for r in caplog.records)


def test_chat_on_a_chat_model_does_not_warn(smollm2_path, caplog):
    with caplog.at_level(logging.WARNING, logger="oxillama"):
        assert main(["run", "-m", smollm2_path, "--chat", "-n", "2", "hi"]) == 0
    assert not any("no chat template" in r.getMessage() for r in caplog.records)


def test_too_many_threads_warn_and_still_run(smollm2_path, caplog, capsys, monkeypatch):
    from oxillama import _system
    monkeypatch.setattr(_system, "_warned_oversubscribe", set())
    monkeypatch.delenv(_system.OVERSUBSCRIBE_ENV, raising=False)
    with caplog.at_level(logging.WARNING, logger="oxillama"):
        assert main(["run", "-m", smollm2_path, "-t", "1000", "-n", "2", "--temp", "0", "hi"]) == 0
    assert any("1000 threads requested" in r.getMessage() for r in caplog.records)


def test_inspect_takes_a_known_model_name(smollm2_path, capsys):
    assert main(["inspect", "smollm2-135m", "--json", "--no-tensors"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["architecture"] == "llama"


def test_pull_list_shows_paths_and_base_models(smollm2_path, gemma3_path, capsys):
    assert main(["pull", "--list"]) == 0
    out = capsys.readouterr().out
    assert str(hub.model_path("smollm2-135m")) in out and str(hub.model_path("gemma3-270m")) in out
    gemma = out[out.index("gemma3-270m"):]
    assert "base model" in gemma.splitlines()[0]
    assert "base model" not in out[:out.index("gemma3-270m")]


@pytest.mark.parametrize("value", ["1", "0.5", "inf", "nan"])
def test_serve_refuses_a_decode_slowdown_of_one_or_less(value, capsys):
    """checked before the model is looked up or a port opened"""
    assert main(["serve", "-m", "no-such-model", "--max-decode-slowdown", value]) == 1
    assert "--max-decode-slowdown must be > 1" in capsys.readouterr().err


def test_a_context_too_small_for_the_prompt_says_why_and_suggests_c(smollm2_path, capsys):
    assert main(["run", "-m", smollm2_path, "--raw", "-c", "5", "one two three four five six"]) == 1
    err = capsys.readouterr().err
    assert "room for the prompt and one token more" in err and "n_ctx >= " in err
    assert "-c N" in err
