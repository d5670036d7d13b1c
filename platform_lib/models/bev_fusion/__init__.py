"""BEV fusion model: config (no torch), sample preparation (loader side) and network.

Chain: sample -> `prepare.prepare_sample` (BEV scatter, camera lift slots, target) ->
`model.BEVFusion`; `config.BEVFusionConfig` sets the grid and sizes. Import from the modules.
"""
