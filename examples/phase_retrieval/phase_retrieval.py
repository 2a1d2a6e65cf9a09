"""Online phase retrieval: teacher `y = ν² + σζ`, student `ŷ = λ²`, one row each."""

from typing import ClassVar

from headflow.dynamics.models import AbstractModel, Rows, SignFlip, param


class PhaseRetrieval(AbstractModel):
    """Phase retrieval: `y = (w*·x/√D)² + σζ` learned by `ŷ = (w·x/√D)²`.

    The target is even in its field, so the law of the SGD increment is invariant under
    `ν → −ν` (`R → −R`): the equator `R = 0` is an invariant subspace that online SGD leaves
    only through its fluctuations, in a time that grows like ln D."""

    kind: ClassVar[str] = "phase_retrieval"
    rows: ClassVar[Rows] = Rows(students=1, teachers=1, student_std="init_std")
    t_max: ClassVar[float] = 40.0

    noise: float = param(0.0, ge=0, help="σ, the label noise")
    init_std: float = param(1.0, gt=0, help="the student's start, w ~ N(0, s² I)")

    def predict(self, params, lam):
        return lam[0] ** 2

    def target(self, params, nu):
        return nu[0] ** 2

    def polynomial_degree(self):
        return 2                      # exact Gauss–Hermite expectations

    def symmetries(self):
        return (SignFlip(teacher=0),)
