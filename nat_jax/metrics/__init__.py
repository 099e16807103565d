"""What results are measured with: corpus BLEU and chrF (scoring.py) and timing (timing.py: warm-up, repeats,
median, block_until_ready). Imports nothing of ours."""
