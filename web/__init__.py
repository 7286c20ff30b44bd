"""The browser pages and their JS client, served as static files (a package so that an
installed swapcast carries them)."""
