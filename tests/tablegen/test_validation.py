"""Bad input: a ValueError whose message names the offending parameter; edge values that are legal."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tablegen.engine import delta_bounds, eps0_max, eps_bounds
from tablegen.mechanisms import get_mechanism

GOOD = {"eps0": 1.0, "n": 100, "delta": 1e-6}


def _eps(**overrides):
    kwargs = {"k": 3, **GOOD, **overrides}
    mech = kwargs.pop("mech", "krr")
    return eps_bounds(mech, lower=False, **kwargs)


@pytest.mark.parametrize("value", [0, 0.0, -1.0, math.nan, math.inf, -math.inf, "abc", None, True])
def test_bad_eps0(value):
    with pytest.raises(ValueError, match="eps0"):
        _eps(eps0=value)
    with pytest.raises(ValueError, match="eps0"):
        delta_bounds("generic", eps0=value, n=10, eps=0.1)


@pytest.mark.parametrize("value", [0, -3, 1.5, math.nan, math.inf, "ten", True])
def test_bad_n(value):
    with pytest.raises(ValueError, match=r"\bn\b"):
        _eps(n=value)
    with pytest.raises(ValueError, match=r"\bn\b"):
        delta_bounds("generic", eps0=1.0, n=value, eps=0.1)


@pytest.mark.parametrize("value", [0, 0.0, 1, 1.0, -1, 2.0, math.nan, math.inf])
def test_bad_delta(value):
    with pytest.raises(ValueError, match="delta"):
        _eps(delta=value)
    with pytest.raises(ValueError, match="delta"):
        eps0_max("krr", eps=0.5, n=100, delta=value, k=3)


@pytest.mark.parametrize("value", [-0.1, math.nan, math.inf])
def test_bad_eps(value):
    with pytest.raises(ValueError, match="eps"):
        delta_bounds("krr", eps0=1.0, n=10, eps=value, k=3)
    with pytest.raises(ValueError, match="eps"):
        eps0_max("krr", eps=value, n=10, delta=1e-6, k=3)


@pytest.mark.parametrize("value", [1, 0, -2, 2.5, "x"])
def test_bad_k(value):
    with pytest.raises(ValueError, match=r"\bk\b"):
        _eps(k=value)


def test_krr_requires_k():
    with pytest.raises(ValueError, match=r"\bk\b"):
        eps_bounds("krr", eps0=1.0, n=100, delta=1e-6)


@pytest.mark.parametrize("value", [1, 0])
def test_bad_olh_buckets(value):
    with pytest.raises(ValueError, match=r"\bg\b"):
        eps_bounds("olh", eps0=1.0, n=100, delta=1e-6, g=value)


@pytest.mark.parametrize("value", [-1e-3, 1.0, 2.0, math.nan])
def test_bad_delta0(value):
    with pytest.raises(ValueError, match="delta0"):
        delta_bounds("generic", eps0=1.0, n=100, eps=0.1, delta0=value)


@pytest.mark.parametrize("name", ["nope", "KRRR", "", "generic-closed-form-x", None, 3])  # KRR is krr
def test_unknown_mechanism_lookup(name):
    with pytest.raises(ValueError, match="mechanism"):
        get_mechanism(name)


@pytest.mark.parametrize("name", ["nope", "KRRR", "", "generic-closed-form-x"])
def test_unknown_mechanism(name):
    with pytest.raises(ValueError, match="mechanism"):
        eps_bounds(name, eps0=1.0, n=100, delta=1e-6)
    with pytest.raises(ValueError, match="mechanism"):
        delta_bounds(name, eps0=1.0, n=100, eps=0.1)
    with pytest.raises(ValueError, match="mechanism"):
        eps0_max(name, eps=0.5, n=100, delta=1e-6)


@pytest.mark.parametrize("name", [None, 3])
def test_non_string_mechanism(name):
    with pytest.raises(ValueError, match="mechanism"):
        eps_bounds(name, eps0=1.0, n=100, delta=1e-6)


def test_unknown_parameter_is_named():
    with pytest.raises(ValueError, match="bogus"):
        eps_bounds("generic", eps0=1.0, n=100, delta=1e-6, bogus=3)


@pytest.mark.parametrize(
    "matrix",
    [
        [[0.5, 0.6], [0.5, 0.5]],  # row sum 1.1
        [[0.5, 0.4], [0.5, 0.5]],  # row sum 0.9
        [[1.2, -0.2], [0.5, 0.5]],  # negative entry
        [[0.5, 0.5]],  # a single input
        [0.5, 0.5],  # not 2-d
        [[0.5, math.nan], [0.5, 0.5]],
        "not a matrix",
    ],
)
def test_bad_matrix(matrix):
    with pytest.raises(ValueError, match="matrix"):
        delta_bounds("finite", eps0=1.0, n=10, eps=0.1, matrix=matrix)


def test_matrix_not_eps0_ldp():
    matrix = [[0.8, 0.2], [0.2, 0.8]]  # local epsilon log 4 ~ 1.386
    with pytest.raises(ValueError, match="matrix") as info:
        delta_bounds("finite", eps0=1.0, n=10, eps=0.1, matrix=matrix)
    assert "eps0" in str(info.value)
    # a zero entry opposite a positive one is not eps0-LDP for any finite eps0
    with pytest.raises(ValueError, match="matrix"):
        delta_bounds("finite", eps0=5.0, n=10, eps=0.1, matrix=[[1.0, 0.0], [0.5, 0.5]])
    # at its own local epsilon the matrix is accepted
    assert delta_bounds("finite", eps0=math.log(4), n=10, eps=0.1, matrix=matrix).upper > 0


def test_finite_accepts_numpy_and_drops_empty_outputs():
    matrix = np.array([[0.6, 0.4, 0.0], [0.4, 0.6, 0.0]])
    a = delta_bounds("finite", eps0=math.log(1.5), n=20, eps=0.1, matrix=matrix)
    b = delta_bounds("finite", eps0=math.log(1.5), n=20, eps=0.1, matrix=matrix[:, :2].tolist())
    assert a.upper == b.upper


@pytest.mark.parametrize(
    "params,word",
    [
        ({"bases": "krr,oue", "weights": "0.5,0.6", "k": 3}, "weights"),
        ({"bases": "krr,oue", "weights": "1.0", "k": 3}, "weights"),
        ({"bases": "krr,nope", "weights": "0.5,0.5", "k": 3}, "mechanism"),
        ({"bases": "krr,oue", "weights": "-0.5,1.5", "k": 3}, "weights"),
    ],
)
def test_bad_parallel(params, word):
    with pytest.raises(ValueError, match=word):
        delta_bounds("parallel", eps0=1.0, n=10, eps=0.1, **params)


@pytest.mark.parametrize("params,word", [({"base": "nope"}, "mechanism"), ({"base": "generic", "parts": 0}, "parts")])
def test_bad_joint(params, word):
    with pytest.raises(ValueError, match=word):
        delta_bounds("joint", eps0=1.0, n=10, eps=0.1, **params)


def test_joint_requires_base():
    with pytest.raises(ValueError, match="base"):
        delta_bounds("joint", eps0=1.0, n=10, eps=0.1)


def test_legal_edge_values():
    """n = 1, n given as a float integer (1e3), delta close to 0 and 1, eps = 0 are legal."""
    b = eps_bounds("krr", eps0=1.0, n=1, delta=1e-6, k=3)
    assert 0 < b.upper <= 1.0
    assert (
        eps_bounds("krr", eps0=1.0, n=1e3, delta=1e-6, k=3, lower=False).upper
        == eps_bounds("krr", eps0=1.0, n=1000, delta=1e-6, k=3, lower=False).upper
    )
    assert 0 < _eps(delta=0.999).upper <= _eps(delta=1e-15).upper <= 1.0
    assert delta_bounds("krr", eps0=1.0, n=1, eps=0.0, k=3).upper > 0
    assert delta_bounds("krr", eps0=1.0, n=np.int64(10), eps=np.float64(0.2), k=np.int64(3)).upper > 0
