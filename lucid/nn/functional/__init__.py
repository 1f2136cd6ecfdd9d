"""lucid.nn.functional: stateless versions of the layers, activations and losses."""
