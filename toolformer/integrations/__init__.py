"""Other programs' interfaces: the lm-evaluation-harness model (:mod:`~toolformer.integrations.lmeval`,
:mod:`~toolformer.integrations.lmeval_model`; lm-eval is imported only there), evaluation files written as
lm-eval tasks (:mod:`~toolformer.integrations.lmeval_tasks`) and the enabled tools as an MCP server over stdio
(:mod:`~toolformer.integrations.mcpserve`)."""
