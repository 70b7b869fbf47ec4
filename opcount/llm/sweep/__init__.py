"""Many phase points from a few traces: records fitted as polynomials in batch, tokens and cache length, each
point's kernels priced by arithmetic, and its figures as plain values."""
