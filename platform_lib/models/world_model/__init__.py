"""World model: a BEV-token temporal transformer predicting the next frame's BEV occupancy."""
