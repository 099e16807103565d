"""Training a run: config defaults and validation, the pure jitted steps, the loop with its bookkeeping
(CPU clock, metrics log, signals, resume) and the final test; sequence-level distillation of a teacher."""
