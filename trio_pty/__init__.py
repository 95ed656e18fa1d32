"""trio-pty: commands under real pseudo-terminals, in trio task trees, torn down strictly."""
