"""Log-probs and entropy from the last hidden states in chunks (grpo.chunked_token_logprobs), checked against the
full-logits path (grpo.token_logprobs) in float64: values and gradients.  Run: python -m pytest tests/test_memory.py -q
"""
import pytest
import torch

import grpo

torch.set_num_threads(1)


def _case(n=3, t=7, h=16, v=50, bias=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    hid = torch.randn(n, t, h, generator=g, dtype=torch.float64, requires_grad=True)
    w = (torch.randn(v, h, generator=g, dtype=torch.float64) * 0.7).requires_grad_()
    b = (torch.randn(v, generator=g, dtype=torch.float64)).requires_grad_() if bias else None
    tok = torch.randint(0, v, (n, t), generator=g)
    return hid, w, b, tok


def _grads(loss, leaves):
    return torch.autograd.grad(loss, [x for x in leaves if x is not None])


@pytest.mark.parametrize("with_entropy", [False, True])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("chunk", [1, 4, 1000])
def test_chunked_equals_full_logits_float64(with_entropy, temperature, bias, chunk):
    hid, w, b, tok = _case(bias=bias)
    logits = hid @ w.T + (b if b is not None else 0)
    lp_ref, ent_ref = grpo.token_logprobs(logits, tok, temperature, with_entropy)
    lp, ent = grpo.chunked_token_logprobs(hid, w, tok, b, temperature, with_entropy, chunk_size=chunk)
    assert lp.dtype == torch.float64 and lp.shape == tok.shape
    torch.testing.assert_close(lp, lp_ref, rtol=0, atol=1e-12)
    assert (ent is None) == (ent_ref is None) == (not with_entropy)
    if with_entropy:
        torch.testing.assert_close(ent, ent_ref, rtol=0, atol=1e-12)
    # gradients w.r.t. hidden states, LM-head weight and bias, with random upstream weights on both outputs
    g = torch.Generator().manual_seed(1)
    u = torch.randn(tok.shape, generator=g, dtype=torch.float64)
    e = torch.randn(tok.shape, generator=g, dtype=torch.float64)
    ref = _grads((lp_ref * u).sum() + ((ent_ref * e).sum() if with_entropy else 0), [hid, w, b])
    got = _grads((lp * u).sum() + ((ent * e).sum() if with_entropy else 0), [hid, w, b])
    for a, r in zip(got, ref):
        assert r.abs().max() > 1e-3  # a real gradient
        torch.testing.assert_close(a, r, rtol=0, atol=1e-10)


def test_gradcheck_finite_differences():
    """The hand-written backward against finite differences (independent of the full-logits path)."""
    hid, w, b, tok = _case(n=2, t=3, h=5, v=11, bias=True)

    def f(hid, w, b):
        lp, ent = grpo.chunked_token_logprobs(hid, w, tok, b, 0.8, True, chunk_size=2)
        return lp, ent

    assert torch.autograd.gradcheck(f, (hid, w, b))


def test_entropy_only_in_loss_and_logged_entropy():
    """Entropy in the loss alone (logp unused), and entropy computed but unused (logged only): both backwards match."""
    hid, w, _, tok = _case()
    logits = hid @ w.T
    lp_ref, ent_ref = grpo.token_logprobs(logits, tok, 1.0, True)
    lp, ent = grpo.chunked_token_logprobs(hid, w, tok, None, 1.0, True, chunk_size=5)
    torch.testing.assert_close(_grads(ent.sum(), [hid, w]), _grads(ent_ref.sum(), [hid, w]), rtol=0, atol=1e-10)
    lp, ent = grpo.chunked_token_logprobs(hid, w, tok, None, 1.0, True, chunk_size=5)
    lp_ref, ent_ref = grpo.token_logprobs(hid @ w.T, tok, 1.0, True)
    torch.testing.assert_close(_grads(lp.sum(), [hid, w]), _grads(lp_ref.sum(), [hid, w]), rtol=0, atol=1e-10)


def test_padding_rows_dropped_before_the_call():
    """Callers pass the response rows that count (mask == 1): the values there and every gradient are unchanged,
    because padded positions never enter a masked loss."""
    hid, w, _, tok = _case()
    mask = torch.tensor([[1] * 7, [1] * 3 + [0] * 4, [1] * 5 + [0] * 2], dtype=torch.bool)
    lp_ref, ent_ref = grpo.token_logprobs(hid @ w.T, tok, 0.9, True)
    sel_lp, sel_ent = grpo.chunked_token_logprobs(hid[mask], w, tok[mask], None, 0.9, True, chunk_size=4)
    torch.testing.assert_close(sel_lp, lp_ref[mask], rtol=0, atol=1e-12)
    torch.testing.assert_close(sel_ent, ent_ref[mask], rtol=0, atol=1e-12)
    ref = _grads((lp_ref * mask).sum() + (ent_ref * mask).sum(), [hid, w])
    got = _grads(sel_lp.sum() + sel_ent.sum(), [hid, w])
    for a, r in zip(got, ref):
        torch.testing.assert_close(a, r, rtol=0, atol=1e-10)


def test_bfloat16_matches_full_path_and_keeps_fp32_results():
    """bf16 model: logits in bf16, softmax in fp32 (as the full path), fp32 results, bf16 gradients."""
    hid, w, _, tok = _case(n=2, t=9, h=32, v=300)
    hb, wb = hid.detach().bfloat16().requires_grad_(), w.detach().bfloat16().requires_grad_()
    lp_ref, ent_ref = grpo.token_logprobs(hb @ wb.T, tok, 1.0, True)
    lp, ent = grpo.chunked_token_logprobs(hb, wb, tok, None, 1.0, True, chunk_size=4)
    assert lp.dtype == ent.dtype == torch.float32
    torch.testing.assert_close(lp, lp_ref, rtol=0, atol=1e-5)
    torch.testing.assert_close(ent, ent_ref, rtol=0, atol=1e-5)
    got = _grads(lp.sum(), [hb, wb])
    ref = _grads(lp_ref.sum(), [hb, wb])
    assert got[0].dtype == got[1].dtype == torch.bfloat16
    for a, r in zip(got, ref):
        torch.testing.assert_close(a.float(), r.float(), rtol=2e-2, atol=2e-2)


def test_under_bf16_autocast_fp32_master_weights():
    """bf16 mixed precision (fp32 weights, autocast): logits in bf16 in the forward and in the recomputing backward,
    gradients land in fp32 like the weights; values and gradients match the full path under the same autocast."""
    hid, w, _, tok = _case(n=2, t=9, h=32, v=300)
    h32, w32 = hid.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lp_ref, _ = grpo.token_logprobs(h32 @ w32.T, tok, 1.0)
        lp, _ = grpo.chunked_token_logprobs(h32, w32, tok, None, 1.0, False, chunk_size=4)
    torch.testing.assert_close(lp, lp_ref, rtol=0, atol=1e-5)
    ref = _grads(lp_ref.sum(), [h32, w32])
    got = _grads(lp.sum(), [h32, w32])
    assert got[0].dtype == got[1].dtype == torch.float32
    for a, r in zip(got, ref):
        torch.testing.assert_close(a, r, rtol=1e-2, atol=1e-2)
    # bf16-rounded logits, not fp32 ones: the fp32 path differs by more than the bf16 tolerance
    lp32, _ = grpo.token_logprobs(h32 @ w32.T, tok, 1.0)
    assert (lp32 - lp).abs().max() > 1e-4
