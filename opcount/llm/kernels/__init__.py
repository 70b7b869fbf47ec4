"""A phase's operator calls grouped into the kernels engines launch, each priced on a piece of hardware (the
estimate), and the kernels' times split back over modules and operators."""
