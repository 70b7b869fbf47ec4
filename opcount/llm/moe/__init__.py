"""Mixture-of-experts blocks: recognised by their structure, routed by expectation as a balanced router
would, their active parameters; JetMoE's and LongCat-Flash's variants."""
