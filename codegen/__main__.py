"""`python -m tinyllm_gen ...`: the tinyllm-gen command, for a checkout or an
environment whose scripts directory is not on PATH."""
from .cli import main

main()
