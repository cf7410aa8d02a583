"""The per-failure command's pasteable code (:mod:`flashsim.testing.paste`): pasted into Python, without flashsim, it
runs the framework's own code and raises the AssertionError the page reports; every row's framework code is the
adapter's call bit for bit, whole batch and micro-batch alike."""

import json
import math
import re
import subprocess
import sys
import traceback

import pytest
import torch

from flashsim.cli.conformance import quiet
from flashsim.testing.adapters import tensor_code, variants
from flashsim.testing.conformance import REGISTRY_ROWS
from flashsim.testing.paste import TEMPLATES, counterexample_code
from flashsim.testing.report import InvariantResult
from flashsim.testing.strategies import random_loss_batch

FRAMEWORK_MODULES = {"trl": "trl.trainer.grpo_trainer", "verl": "verl.trainer.ppo.core_algos",
                     "openrlhf": "openrlhf"}


def test_tensor_code_spells_non_finite_values_so_that_python_reads_them_back():
    tensor = torch.tensor([[math.nan, math.inf], [-math.inf, 0.1]], dtype=torch.float32)
    code = tensor_code(tensor, grad=True)
    assert code == ("torch.tensor([[float('nan'), float('inf')], [-float('inf'), 0.10000000149011612]], "
                    "dtype=torch.float32, requires_grad=True)")
    rebuilt = eval(code, {"torch": torch})
    assert rebuilt.requires_grad and torch.equal(rebuilt.isnan(), tensor.isnan())
    assert torch.equal(rebuilt.nan_to_num(0.0), tensor.nan_to_num(0.0))


def test_a_row_without_framework_code_or_an_invariant_without_a_template_prints_none():
    failing = InvariantResult("constant_rewards", "9", "", "FAILS", 1, "m", "c", {}, {"batch": None})
    assert counterexample_code(REGISTRY_ROWS[1], failing) == ""  # flashsim's own rows: the description is the code
    assert "no_gradient_to_behavior" not in TEMPLATES


PASTED = [("trl:grpo", "constant_rewards", "float32"), ("trl:grpo", "padding", "float64"),
          ("verl:geo_mean", "shards", "float64"), ("openrlhf:group_norm-ppo-token_level_loss", "precision", "float64")]
"""One failing cell per framework and a two-call invariant each for TRL, verl and OpenRLHF, each far above rounding.
The cells run in a fresh process, as ``flashsim conformance`` does: Hypothesis mixes constants from the local modules
a process has imported into its draws (flashsim's own, in an editable install; docs/verify.md), so a cell run inside
the suite, after other tests imported more of them, may draw other examples than the page's."""

RUN_CELLS = """
import contextlib, io, json, sys
from flashsim.cli import main
outputs = {}
for key, invariant, dtype in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["conformance", "--row", key, "--invariant", invariant, "--dtype", dtype])
    outputs[f"{key} {invariant} {dtype}"] = [status, out.getvalue(), err.getvalue()]
print(json.dumps(outputs))
"""


@pytest.fixture(scope="module")
def pasted_cells():
    """Each cell of :data:`PASTED` run by the per-failure command in one fresh process: ``(status, stdout, stderr)``
    by ``"key invariant dtype"`` (frameworks that are not installed are left out)."""
    cells = [cell for cell in PASTED if _installed(cell[0].split(":")[0])]
    run = subprocess.run([sys.executable, "-c", RUN_CELLS, json.dumps(cells)], capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def _installed(framework: str) -> bool:
    try:
        __import__(FRAMEWORK_MODULES[framework])
    except ImportError:
        return False
    return True


@pytest.mark.slow  # imports the framework (TRL alone takes ~11 CPU-s); the cell itself ~1 s
@pytest.mark.parametrize(("key", "invariant", "dtype"), PASTED, ids=lambda value: str(value))
def test_the_printed_code_fails_in_the_framework_the_way_the_page_says(key, invariant, dtype, pasted_cells):
    pytest.importorskip(FRAMEWORK_MODULES[key.split(":")[0]])
    status, out, err = pasted_cells[f"{key} {invariant} {dtype}"]
    assert status == 1, out
    assert "Warning" not in out + err and "WARNING" not in out + err
    reported = re.search(rf"\n{invariant}: FAILS\n.*?\n(.*?: (non-finite values|max \|got − expected\| = (\S+) >))",
                         out, re.S)
    assert reported, out
    code = out.split("(paste it into python; it raises AssertionError):\n", 1)[1]
    code = code.split("\n(end of the code)", 1)[0]
    assert not re.search(r"^\s*(import|from) flashsim", code, re.M), code  # the framework's own code, none of ours
    with pytest.raises(AssertionError) as raised, quiet():
        exec(compile(code, "<pasted>", "exec"), {})  # what a maintainer pastes, in a clean namespace
    error = float(re.match(r"max \|got - expected\| = (\S+) >", str(raised.value)).group(1))
    if reported.group(3) is None:  # the page reports non-finite values: so does the pasted code
        assert math.isnan(error), str(raised.value)
    else:
        assert f"{error:.3g}" == reported.group(3), (str(raised.value), reported.group(1))
    line = [frame.lineno for frame in traceback.extract_tb(raised.tb) if frame.filename == "<pasted>"][-1]
    lines = code.splitlines()
    assert lines[line - 1].startswith("assert error <= tolerance")
    assert lines[line - 4].startswith("# it fails here (flashsim got "), lines[line - 5: line]  # where the page says
    if invariant in ("shards", "padding", "precision"):  # two calls (or more) and the comparison
        assert len(re.findall(r"^loss_\w+", code, re.M)) >= 2, code


@pytest.mark.slow  # imports the three frameworks; the calls themselves take ~2 s in all
@pytest.mark.parametrize("framework", list(FRAMEWORK_MODULES))
def test_every_rows_framework_code_is_the_adapters_call_bit_for_bit(framework):
    pytest.importorskip(FRAMEWORK_MODULES[framework])
    generator = torch.Generator().manual_seed(5)
    checked = 0
    for row in variants(framework):
        setup = row.snippet_setup()
        if not setup:
            continue
        for dtype in (torch.float64, torch.float32):
            batch = random_loss_batch(generator, batch_size=6, width=4, drift=0.3, group_size=3,
                                      padding="zeros").to(dtype)
            full = row.advantages(batch.rewards, batch.group_ids).detach()
            part = batch.select([3, 4, 5])
            counts = {"num_sequences": 6, "num_tokens": batch.num_tokens, "max_tokens": 4, "num_shards": 2}
            namespace = {}
            with quiet():
                exec(compile("\n".join([*setup, *row.snippet_call(batch, "full"),
                                        *row.snippet_call(part, "part", advantages="advantages_full[[3, 4, 5]]",
                                                          **counts)]), "<pasted>", "exec"), namespace)
            for name, sample, keywords in (("full", batch, {}), ("part", part, {"advantages": full[3:], **counts})):
                leaf = sample.leaf()
                with quiet():
                    loss = row(leaf, sample.behavior_log_probs, sample.rewards, sample.action_mask, sample.group_ids,
                               **keywords)
                (gradient,) = torch.autograd.grad(loss, leaf)
                assert torch.equal(namespace[f"loss_{name}"].detach(), loss.detach()), (row.key, dtype, name)
                assert torch.equal(namespace[f"grad_{name}"], gradient), (row.key, dtype, name)
            assert torch.equal(namespace["advantages_full"], full), row.key
            checked += 1
    assert checked >= 2 * 7, checked  # every row but flashsim's own integrations
