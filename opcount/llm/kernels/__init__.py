"""A phase's operator calls grouped into the kernels engines launch, each priced on a piece of hardware (the
estimate), and the kernels' times split back over modules and operators."""

# How the estimate groups a phase's calls into kernels: as serving engines fuse them, or one per operator.
# Here rather than in estimate.py, so that the command line's --kernels choices import no estimator.
MODES = ("fused", "eager")
