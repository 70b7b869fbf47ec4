"""The precision of each role (weights, activations, KV cache): the dtypes accepted, each weight format's
bytes with its scales, which format each weight is in, and the weights kept in float32."""
