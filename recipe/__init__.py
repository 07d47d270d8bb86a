"""The GRPO recipe and its models: verl's settings (grpo), the layout and batch derivation
(tuning), the GPU memory model (memory) and the step-time and run-size estimates (sizing).

Pure: nothing here imports Pulumi, the stack config or the components.
"""
