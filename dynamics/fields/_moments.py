"""Moments of products of jointly Gaussian variables with non-zero means (Isserlis/Wick).

For jointly Gaussian `a, b, c, d` with means `ā, b̄, c̄, d̄`, every moment is a sum over the ways
to split the factors into pairs (covariances) and singletons (means). Written with the second
moments `E[ab] = Cov(a, b) + ā b̄`:

- `E[abc] = E[ab] c̄ + E[ac] b̄ + E[bc] ā − 2 ā b̄ c̄`;
- `E[abcd] = E[ab] E[cd] + E[ac] E[bd] + E[ad] E[bc] − 2 ā b̄ c̄ d̄`.

`tests/test_moments.py` checks both exactly against derivatives of the Gaussian
moment-generating function (sympy). The functions broadcast over their (equal-shaped)
arguments.
"""

from __future__ import annotations

from jaxtyping import Array, Float


def third_moment(mean_a: Float[Array, "*#shape"], mean_b: Float[Array, "*#shape"],
                 mean_c: Float[Array, "*#shape"], e_ab: Float[Array, "*#shape"],
                 e_ac: Float[Array, "*#shape"], e_bc: Float[Array, "*#shape"]
                 ) -> Float[Array, "*#shape"]:
    """`E[abc]` from the means and the second moments `E[ab]`, `E[ac]`, `E[bc]`."""
    return e_ab * mean_c + e_ac * mean_b + e_bc * mean_a - 2.0 * mean_a * mean_b * mean_c


def fourth_moment(mean_a: Float[Array, "*#shape"], mean_b: Float[Array, "*#shape"],
                  mean_c: Float[Array, "*#shape"], mean_d: Float[Array, "*#shape"],
                  e_ab: Float[Array, "*#shape"], e_ac: Float[Array, "*#shape"],
                  e_ad: Float[Array, "*#shape"], e_bc: Float[Array, "*#shape"],
                  e_bd: Float[Array, "*#shape"], e_cd: Float[Array, "*#shape"]
                  ) -> Float[Array, "*#shape"]:
    """`E[abcd]` from the means and the six second moments."""
    return (e_ab * e_cd + e_ac * e_bd + e_ad * e_bc
            - 2.0 * mean_a * mean_b * mean_c * mean_d)
