"""Model zoo: BEV fusion networks and BEV occupancy targets.

Chain: decoded sample -> `bev_fusion.prepare.prepare_sample` (in the loader workers) ->
`bev_fusion.model.BEVFusion` -> (B, 3, H, W) occupancy logits. Import from the modules;
`presets.py` needs no torch. README.md in this package.
"""
