"""posenc.torch: the encodings as PyTorch modules, and the small encoder that uses them."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import nbformat
import numpy as np
import pytest
import torch
from torch import nn

import posenc.torch as pt
from conftest import NOTEBOOKS
from posenc import sinusoidal


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def float32_table(length, d_model, **kwargs):
    """The module's float32 table: the float64 one rounded once (see its docstring)."""
    return torch.from_numpy(sinusoidal(length, d_model, **kwargs).astype(np.float32))


# --- SinusoidalPositionalEncoding -------------------------------------------------------


def test_the_table_is_a_buffer_not_a_parameter():
    module = pt.SinusoidalPositionalEncoding(32, max_len=64)
    assert [name for name, _ in module.named_buffers()] == ["pe"]
    assert list(module.parameters()) == []
    assert not module.pe.requires_grad


def test_the_buffer_is_not_persistent():
    module = pt.SinusoidalPositionalEncoding(32, max_len=64)
    assert module.state_dict() == {}
    model = pt.TransformerWithPositionalEncoding(10, 32, 4, max_len=64)
    assert not any(key.endswith("pe") for key in model.state_dict())


@pytest.mark.parametrize("d_model", [1, 2, 7, 64, 512])
@pytest.mark.parametrize("base", [100.0, 10000.0])
def test_float32_table_is_the_float64_table_rounded_once(d_model, base):
    module = pt.SinusoidalPositionalEncoding(d_model, max_len=300, base=base)
    assert module.pe.dtype == torch.float32
    assert torch.equal(module.pe, float32_table(300, d_model, base=base))


def test_float64_table_equals_the_float64_formula():
    module = pt.SinusoidalPositionalEncoding(10, max_len=50, dtype=torch.float64)
    assert torch.equal(module.pe, torch.from_numpy(sinusoidal(50, 10)))


@pytest.mark.parametrize("batch_first", [True, False])
def test_forward_adds_row_t_to_token_t_of_every_sequence(batch_first):
    module = pt.SinusoidalPositionalEncoding(12, max_len=40, batch_first=batch_first)
    zeros = torch.zeros((3, 9, 12) if batch_first else (9, 3, 12))
    added = module(zeros)
    per_sequence = added if batch_first else added.transpose(0, 1)
    for sequence in per_sequence:
        assert torch.equal(sequence, float32_table(9, 12))
    x = torch.randn(zeros.shape)
    assert torch.equal(module(x), x + added)


def test_float64_input_gets_the_buffer_in_float64():
    module = pt.SinusoidalPositionalEncoding(8, max_len=10)
    out = module(torch.zeros(1, 10, 8, dtype=torch.float64))
    assert out.dtype == torch.float64
    assert torch.equal(out[0], float32_table(10, 8).double())


def test_past_max_len_the_rows_are_computed_exactly_and_the_module_is_unchanged():
    module = pt.SinusoidalPositionalEncoding(16, max_len=20)
    stored = module.pe
    out = module(torch.zeros(2, 75, 16))
    assert torch.equal(out[1], float32_table(75, 16))
    # forward reassigns no buffer: same tensor, same length, nothing in checkpoints.
    assert module.pe is stored and module.max_len == module.pe.shape[0] == 20
    assert module.state_dict() == {}


def test_past_max_len_without_extend_the_error_names_max_len():
    module = pt.SinusoidalPositionalEncoding(16, max_len=20, extend=False)
    assert module(torch.zeros(1, 20, 16)).shape == (1, 20, 16)
    with pytest.raises(ValueError, match=r"sequence length 21 exceeds max_len=20"):
        module(torch.zeros(1, 21, 16))


@pytest.mark.parametrize("max_len", [40, 12, 5])
def test_a_sequence_fed_in_pieces_gets_the_rows_of_the_whole(max_len):
    # A decoder with a cache feeds one new token (or a chunk) at a time: the piece
    # starting at offset t gets rows t, t+1, ..., inside max_len, across it, or past it.
    module = pt.SinusoidalPositionalEncoding(8, max_len=max_len)
    x = torch.randn(2, 20, 8)
    whole = module(x)
    pieces = [module(x[:, t : t + 3], offset=t) for t in range(0, 20, 3)]
    assert torch.equal(torch.cat(pieces, dim=1), whole)
    assert torch.equal(module(torch.zeros(1, 20, 8))[0], float32_table(20, 8))
    first = pt.SinusoidalPositionalEncoding(8, max_len=max_len, batch_first=False)
    assert torch.equal(first(x[:, 7:8].transpose(0, 1), offset=7), whole[:, 7:8].transpose(0, 1))


def test_an_offset_past_max_len_without_extend_names_it():
    module = pt.SinusoidalPositionalEncoding(16, max_len=20, extend=False)
    assert module(torch.zeros(1, 1, 16), offset=19).shape == (1, 1, 16)
    with pytest.raises(ValueError, match=r"sequence length 1 from offset 20 exceeds max_len=20"):
        module(torch.zeros(1, 1, 16), offset=20)


@pytest.mark.parametrize("offset, error", [(-1, ValueError), (1.0, TypeError), (True, TypeError)])
def test_a_bad_offset_is_refused(offset, error):
    # A negative offset would slice pe[-1:0], an empty table that broadcasting
    # would silently turn into an empty output.
    with pytest.raises(error, match="offset"):
        pt.SinusoidalPositionalEncoding(8, max_len=10)(torch.zeros(1, 1, 8), offset=offset)


def test_dropout_acts_on_the_sum_in_training_only():
    module = pt.SinusoidalPositionalEncoding(64, max_len=128, dropout=0.25)
    x = torch.randn(8, 128, 64)
    clean = x + float32_table(128, 64)
    module.eval()
    assert torch.equal(module(x), clean)
    module.train()
    noisy = module(x)
    dropped = noisy == 0
    assert 0.23 < dropped.float().mean().item() < 0.27  # 65,536 draws: 4 sigma is ~0.007
    assert torch.allclose(noisy[~dropped], clean[~dropped] / 0.75, rtol=1e-6, atol=0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_a_module_built_in_a_dtype_has_its_table_rounded_once(dtype):
    module = pt.SinusoidalPositionalEncoding(8, max_len=300, dtype=dtype)
    expected = torch.from_numpy(sinusoidal(300, 8)).to(dtype)
    assert torch.equal(module.pe, expected)


def test_converting_the_module_converts_the_table_like_any_buffer():
    module = pt.SinusoidalPositionalEncoding(8, max_len=300).double()
    assert module.pe.dtype == torch.float64 and module.state_dict() == {}
    assert torch.equal(module.pe, float32_table(300, 8).double())
    error = (module.pe - torch.from_numpy(sinusoidal(300, 8))).abs().max().item()
    assert 0 < error <= 2.0**-25  # the float32 rounding, kept


def test_the_module_overrides_no_private_torch_method():
    overridden = {
        name
        for name in vars(pt.SinusoidalPositionalEncoding)
        if name.startswith("_") and not name.startswith("__") and hasattr(nn.Module, name)
    }
    assert not overridden, overridden


# --- loading checkpoints ----------------------------------------------------------------


def tutorial_style_state(length, d_model, **kwargs):
    """The state_dict of a module that persisted a sequence-first (max_len, 1, d) table."""
    return {"pe": float32_table(length, d_model, **kwargs).unsqueeze(1)}


def test_a_checkpoint_with_the_right_table_loads_and_keeps_the_formula():
    module = pt.SinusoidalPositionalEncoding(16, max_len=100)
    result = module.load_state_dict(tutorial_style_state(500, 16))
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert module.pe.shape == (100, 16)
    assert torch.equal(module.pe, float32_table(100, 16))


@pytest.mark.parametrize(
    ("state", "message"),
    [
        (tutorial_style_state(50, 16, layout="concat"), r"differs .* by up to .*; .*concat layout"),
        (tutorial_style_state(50, 16, base=1000.0), r"differs .* by up to .*; .*base = 1000,"),
        ({"pe": float32_table(50, 16)[:, [1, 0, *range(2, 16)]]}, r"differs .* by up to"),
        (
            {"pe": float32_table(50, 16)[:, np.arange(16) ^ 1]},
            r"differs .*; sin and cos are swapped",
        ),
        (tutorial_style_state(50, 8), r"not \(length, 16\)"),
        ({"pe": float32_table(50, 16).fill_(float("nan"))}, r"differs .* by up to nan"),
        ({"pe": torch.zeros(16)}, r"not \(length, 16\)"),
    ],
)
def test_a_checkpoint_with_a_wrong_table_is_refused(state, message):
    module = pt.SinusoidalPositionalEncoding(16, max_len=100)
    with pytest.raises(RuntimeError, match=r"pe: .*" + message):
        module.load_state_dict(state)


@pytest.mark.parametrize("shape", ["sequence-first", "batch-first", "flat"])
def test_stored_tables_of_every_common_shape_are_checked(shape):
    right, wrong = float32_table(40, 16), float32_table(40, 16, layout="concat")
    arrange = {
        "sequence-first": lambda t: t.unsqueeze(1),  # the PyTorch tutorial's (L, 1, d)
        "batch-first": lambda t: t.unsqueeze(0),  # the Annotated Transformer's (1, L, d)
        "flat": lambda t: t,
    }[shape]
    module = pt.SinusoidalPositionalEncoding(16, max_len=100)
    module.load_state_dict({"pe": arrange(right)})
    with pytest.raises(RuntimeError, match="differs"):
        module.load_state_dict({"pe": arrange(wrong)})


def test_a_nested_checkpoint_is_checked_under_its_prefix():
    model = pt.TransformerWithPositionalEncoding(10, 16, 2, max_len=32)
    state = {**model.state_dict(), "position.pe": float32_table(32, 16, layout="concat")}
    with pytest.raises(RuntimeError, match=r"position\.pe: the stored table differs"):
        model.load_state_dict(state)
    state["position.pe"] = float32_table(32, 16)
    assert not model.load_state_dict(state).unexpected_keys


def float32_arithmetic_table(length, d_model):
    """A correct table computed in float32 throughout, as the PyTorch tutorial does."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    angles = position * torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
    table = torch.zeros(length, d_model)
    table[:, 0::2], table[:, 1::2] = torch.sin(angles), torch.cos(angles)
    return table


@pytest.mark.parametrize("length", [100, 5000, 30000, 60000])
def test_the_tolerance_admits_correct_float32_and_float16_tables(length):
    module = pt.SinusoidalPositionalEncoding(64, max_len=10)
    table = float32_arithmetic_table(length, 64)
    error = (table.double() - torch.from_numpy(sinusoidal(length, 64))).abs().max().item()
    assert error < pt.stored_table_tolerance(length)
    module.load_state_dict({"pe": table})
    module.load_state_dict({"pe": torch.from_numpy(sinusoidal(length, 64, dtype=np.float16))})


@pytest.mark.parametrize("length", [2, 100, 60000])
@pytest.mark.parametrize(
    "wrong",
    [{"start": 1}, {"base": 1000.0}, {"layout": "concat"}],
    ids=["shifted", "base", "layout"],
)
def test_the_tolerance_refuses_wrong_tables_at_any_length(length, wrong):
    module = pt.SinusoidalPositionalEncoding(64, max_len=10)
    with pytest.raises(RuntimeError, match="differs"):
        module.load_state_dict({"pe": float32_table(length, 64, **wrong)})


@pytest.mark.parametrize("length", [100, 512, 2048])
def test_a_correct_bfloat16_table_loads_and_a_wrong_one_is_refused(length):
    # bfloat16 rounds values in [0.5, 1) by up to 2**-9, above the 1e-3 floor
    module = pt.SinusoidalPositionalEncoding(64, max_len=10)
    exact = torch.from_numpy(sinusoidal(length, 64))
    stored = exact.to(torch.bfloat16)
    assert (stored.double() - exact).abs().max().item() > 1e-3
    module.load_state_dict({"pe": stored})
    concat = sinusoidal(length, 64, layout="concat")
    with pytest.raises(RuntimeError, match="differs"):
        module.load_state_dict({"pe": torch.from_numpy(concat).to(torch.bfloat16)})


def test_the_tolerance_adds_half_an_ulp_of_the_stored_dtype():
    assert pt.stored_table_tolerance(1, torch.bfloat16) == 1e-3 + 2.0**-8
    assert pt.stored_table_tolerance(1, torch.float16) == 1e-3 + 2.0**-11
    assert pt.stored_table_tolerance(1, torch.int64) == 1e-3


def test_the_tolerance_grows_with_length():
    assert pt.stored_table_tolerance(1) == 1e-3
    assert math.isclose(pt.stored_table_tolerance(2**20 + 1), 1e-3 + 0.25)


# --- LearnedPositionalEncoding ----------------------------------------------------------


def test_learned_table_is_max_len_by_d_model_trainable_numbers():
    module = pt.LearnedPositionalEncoding(24, max_len=40)
    (name, table), *rest = module.named_parameters()
    assert (name, tuple(table.shape), rest) == ("table", (40, 24), [])
    assert table.requires_grad
    assert sum(p.numel() for p in module.parameters()) == 40 * 24
    assert 0.015 < table.std().item() < 0.025


def test_learned_forward_adds_the_first_rows_and_trains_only_those():
    module = pt.LearnedPositionalEncoding(6, max_len=10)
    out = module(torch.zeros(2, 4, 6))
    assert torch.equal(out[1], module.table[:4])
    out.sum().backward()
    assert torch.equal(module.table.grad[:4], torch.full((4, 6), 2.0))
    assert torch.equal(module.table.grad[4:], torch.zeros(6, 6))


def test_learned_offset_takes_the_rows_of_those_positions():
    module = pt.LearnedPositionalEncoding(6, max_len=10)
    assert torch.equal(module(torch.zeros(1, 2, 6), offset=8)[0], module.table[8:10])
    with pytest.raises(ValueError, match=r"sequence length 2 from offset 9 exceeds max_len=10"):
        module(torch.zeros(1, 2, 6), offset=9)


def test_learned_table_dtype():
    module = pt.LearnedPositionalEncoding(6, max_len=10, dtype=torch.float64)
    assert module.table.dtype == torch.float64
    assert module(torch.zeros(1, 3, 6, dtype=torch.float64)).dtype == torch.float64


def test_learned_sequence_first():
    module = pt.LearnedPositionalEncoding(6, max_len=10, batch_first=False)
    out = module(torch.zeros(4, 3, 6))
    assert torch.equal(out[:, 2], module.table[:4])


def test_learned_past_max_len_the_error_names_max_len():
    module = pt.LearnedPositionalEncoding(6, max_len=10)
    with pytest.raises(ValueError, match=r"sequence length 11 exceeds max_len=10"):
        module(torch.zeros(1, 11, 6))


# --- bad input --------------------------------------------------------------------------


@pytest.mark.parametrize("make", [pt.SinusoidalPositionalEncoding, pt.LearnedPositionalEncoding])
@pytest.mark.parametrize("shape", [(5, 16), (2, 5, 15), (1, 2, 5, 16), (16,)])
def test_wrong_rank_or_width_names_both_shapes(make, shape):
    module = make(16, 32)
    expected = re.escape(
        f"(batch, length, d_model) with d_model = 16 (batch_first=True), got {shape}"
    )
    with pytest.raises(ValueError, match=expected):
        module(torch.zeros(shape))


def test_sequence_first_message_names_its_layout():
    module = pt.SinusoidalPositionalEncoding(16, 32, batch_first=False)
    with pytest.raises(ValueError, match=re.escape("(length, batch, d_model)")):
        module(torch.zeros(5, 16))


@pytest.mark.parametrize(
    ("x", "error"),
    [
        (torch.zeros(1, 2, 16, dtype=torch.int64), "floating-point"),
        (np.zeros((1, 2, 16)), "torch.Tensor"),
    ],
)
def test_wrong_kind_of_input(x, error):
    with pytest.raises(TypeError, match=error):
        pt.SinusoidalPositionalEncoding(16, 32)(x)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"d_model": 0}, ValueError, "d_model must be at least 1"),
        ({"d_model": 8.0}, TypeError, "d_model must be an integer"),
        ({"max_len": 0}, ValueError, "max_len must be at least 1"),
        ({"max_len": True}, TypeError, "max_len"),
        ({"dropout": 1.0}, ValueError, r"dropout must lie in \[0, 1\)"),
        ({"dropout": "0.1"}, TypeError, "dropout"),
        ({"batch_first": 1}, TypeError, "batch_first must be True or False"),
        ({"base": -1.0}, ValueError, "base must be finite and > 0"),
        ({"extend": None}, TypeError, "extend"),
        ({"dtype": torch.int32}, TypeError, "dtype"),
    ],
)
def test_constructor_arguments_are_checked(kwargs, error, message):
    arguments = {"d_model": 8, "max_len": 16, **kwargs}
    with pytest.raises(error, match=message):
        pt.SinusoidalPositionalEncoding(**arguments)


# --- TransformerWithPositionalEncoding --------------------------------------------------


def make_model(encoding, **kwargs):
    model = pt.TransformerWithPositionalEncoding(
        50, 32, 4, n_layers=2, max_len=64, encoding=encoding, **kwargs
    )
    return model.eval()


def count(model):
    return sum(p.numel() for p in model.parameters())


def test_tokens_in_batch_length_d_model_out():
    tokens = torch.randint(0, 50, (3, 11))
    for encoding in pt.ENCODINGS:
        assert make_model(encoding)(tokens).shape == (3, 11, 32)


def test_token_vectors_start_as_long_as_encoding_rows():
    model = pt.TransformerWithPositionalEncoding(1000, 256, 4, max_len=8)
    scaled = model.embedding.weight * model.scale
    ratio = scaled.norm(dim=1).pow(2).mean().sqrt().item() / math.sqrt(256 / 2)
    assert math.isclose(ratio, math.sqrt(2), rel_tol=0.02)


def test_parameter_counts_differ_by_the_learned_table_only():
    none, sinusoidal_, learned = (count(make_model(e)) for e in ("none", "sinusoidal", "learned"))
    assert sinusoidal_ == none
    assert learned == none + 64 * 32


def test_input_is_the_scaled_embedding_plus_the_table():
    model = make_model("sinusoidal")
    tokens = torch.randint(0, 50, (2, 7))
    seen = []
    model.encoder.layers[0].register_forward_pre_hook(lambda _, args: seen.append(args[0]))
    model(tokens)
    expected = model.embedding(tokens) * 32**0.5 + float32_table(7, 32)
    assert torch.allclose(seen[0], expected, atol=1e-6)
    unscaled = make_model("none", scale_embedding=False)
    unscaled.encoder.layers[0].register_forward_pre_hook(lambda _, args: seen.append(args[0]))
    unscaled(tokens)
    assert torch.equal(seen[1], unscaled.embedding(tokens))


def permutation_gap(model, length=6):
    tokens = torch.randint(0, 50, (1, length))
    order = torch.randperm(length)
    with torch.no_grad():
        return (model(tokens[:, order]) - model(tokens)[:, order]).abs().max().item()


def test_without_an_encoding_the_model_is_permutation_equivariant():
    assert permutation_gap(make_model("none")) < 1e-5


@pytest.mark.parametrize("encoding", ["sinusoidal", "learned"])
def test_with_an_encoding_order_matters(encoding):
    assert permutation_gap(make_model(encoding)) > 1e-2


def test_causal_outputs_do_not_depend_on_later_tokens():
    model = make_model("none")
    tokens = torch.randint(0, 50, (1, 8))
    changed = tokens.clone()
    changed[0, 5:] = (changed[0, 5:] + 1) % 50
    with torch.no_grad():
        a, b = model(tokens, causal=True), model(changed, causal=True)
    assert torch.allclose(a[:, :5], b[:, :5], atol=1e-6)
    assert not torch.allclose(a[:, 5:], b[:, 5:], atol=1e-3)


@pytest.mark.parametrize(
    ("tokens", "error", "message"),
    [
        (torch.zeros(2, 3), TypeError, "int32 or int64"),
        (torch.zeros(3, dtype=torch.int64), ValueError, r"\(batch, length\), got \(3,\)"),
        (torch.tensor([[0, 50]]), ValueError, r"\[0, 50\), got ids from 0 to 50"),
        (torch.tensor([[-1, 2]]), ValueError, r"\[0, 50\)"),
    ],
)
def test_bad_tokens(tokens, error, message):
    with pytest.raises(error, match=message):
        make_model("sinusoidal")(tokens)


def test_model_arguments_are_checked():
    with pytest.raises(ValueError, match="encoding must be one of"):
        make_model("rope")
    with pytest.raises(ValueError, match="n_heads must divide d_model"):
        pt.TransformerWithPositionalEncoding(10, 30, 4)
    with pytest.raises(ValueError, match="max_len=64"):
        make_model("learned")(torch.zeros(1, 65, dtype=torch.int64))


def test_dropout_reaches_the_encoding_and_the_layers():
    model = pt.TransformerWithPositionalEncoding(10, 16, 2, dropout=0.1, max_len=8)
    rates = [m.p for m in model.modules() if isinstance(m, nn.Dropout)]
    assert rates and set(rates) == {0.1}
    assert model.position.dropout.p == 0.1


# --- chapters 1-3 and `import posenc` do not need torch ---------------------------------


def test_posenc_imports_and_runs_without_torch():
    script = (
        "import sys; sys.modules['torch'] = None\n"
        "import posenc, posenc.block, posenc.reference, posenc.properties\n"
        "x = posenc.block.add_positional_encoding(posenc.sinusoidal(4, 6))\n"
        "try:\n    import posenc.torch\nexcept ImportError:\n    print('no torch')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert result.stdout == "no torch\n"


def test_chapters_before_4_do_not_import_torch():
    # Chapter 4 writes the table as a PyTorch buffer and chapter 5 shows bfloat16 in
    # torch; the first three chapters run on NumPy alone.
    earlier = [path for path in NOTEBOOKS if path.name < "04"]
    assert len(earlier) == 3
    for path in earlier:
        code = "\n".join(
            cell.source for cell in nbformat.read(path, 4).cells if cell.cell_type == "code"
        )
        assert not re.search(r"\b(import|from)\s+(posenc\.)?torch\b", code), path.name


def test_the_encoding_compiles_and_keeps_its_values():
    # Dynamo's graph capture (backend "eager": no C++ compiler needed) takes the whole
    # forward as one graph within max_len; past it, the exact extra rows come from NumPy
    # (a graph break), and the module is still unchanged.
    module = pt.SinusoidalPositionalEncoding(16, max_len=20)
    x = torch.randn(2, 10, 16)
    assert torch.equal(torch.compile(module, backend="eager", fullgraph=True)(x), module(x))
    longer = torch.randn(2, 30, 16)
    assert torch.equal(torch.compile(module, backend="eager")(longer), module(longer))
    assert module.pe.shape[0] == 20


# --- what a checkpoint does not record (chapter 7) ---------------------------------------


def test_the_base_is_configuration_not_checkpoint_state():
    # A non-persistent table leaves nothing in the checkpoint that names the base: a
    # module built with another base loads the state without an error and keeps its
    # own table. Chapter 7 shows this trade-off; the base belongs in the configuration.
    trained = pt.SinusoidalPositionalEncoding(16, max_len=32, base=10000.0)
    changed = pt.SinusoidalPositionalEncoding(16, max_len=32, base=1000.0)
    result = changed.load_state_dict(trained.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert torch.equal(changed.pe, float32_table(32, 16, base=1000.0))
    assert (changed.pe - trained.pe).abs().max().item() > 0.1
    assert "base=1000" in repr(changed) and "base=10000" in repr(trained)


def test_a_persistent_table_of_another_length_does_not_load():
    # The rigidity chapter 7 names: PyTorch refuses a persisted buffer of another shape.
    class Saved(nn.Module):
        def __init__(self, length):
            super().__init__()
            self.register_buffer("pe", float32_table(length, 16))

    with pytest.raises(RuntimeError, match="size mismatch for pe"):
        Saved(10).load_state_dict(Saved(20).state_dict())


# --- empty memory, reset_parameters and the MRO -----------------------------------------


@pytest.mark.parametrize("start", ["to_empty", "meta"])
def test_reset_parameters_rebuilds_a_table_that_was_never_written(start):
    # to_empty (and a module built on the meta device) leaves pe as whatever memory held,
    # and load_state_dict cannot refill a non-persistent buffer (transformers #34234).
    if start == "meta":
        module = pt.SinusoidalPositionalEncoding(16, 64, device="meta")
    else:
        module = pt.SinusoidalPositionalEncoding(16, 64)
        module.pe.fill_(float("nan"))  # stands for uninitialised memory, deterministically
    module = module.to_empty(device="cpu")
    module.pe.fill_(float("nan"))
    module.load_state_dict({})
    assert torch.isnan(module.pe).all()  # loading fills nothing
    stored = module.pe
    module.reset_parameters()
    assert module.pe is stored and torch.equal(module.pe, float32_table(64, 16))


def test_reset_parameters_keeps_the_dtype_and_draws_a_learned_table_again():
    module = pt.SinusoidalPositionalEncoding(8, 30, dtype=torch.float64)
    module.pe.zero_()
    module.reset_parameters()
    assert torch.equal(module.pe, torch.from_numpy(sinusoidal(30, 8)))
    learned = pt.LearnedPositionalEncoding(64, 500, init_std=0.01)
    learned.table.data.zero_()
    learned.reset_parameters()
    assert 0.009 < learned.table.std().item() < 0.011


@pytest.mark.parametrize("cls", [pt.SinusoidalPositionalEncoding, pt.LearnedPositionalEncoding])
def test_no_class_in_the_mro_overrides_a_private_torch_method(cls):
    own = [c for c in cls.__mro__ if issubclass(c, nn.Module) and c.__module__ == pt.__name__]
    assert pt._AddedPositionalEncoding in own
    overridden = {
        (c.__name__, name)
        for c in own
        for name in vars(c)
        if name.startswith("_") and not name.startswith("__") and hasattr(nn.Module, name)
    }
    assert not overridden, overridden
