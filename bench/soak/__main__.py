"""`python -m soak` (from bench/): the soak's command."""

from soak.runner import main

main()
