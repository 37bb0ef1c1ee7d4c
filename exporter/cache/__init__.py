"""The artifact cache: built artifact files and their observations, content-addressed (``store``),
under a key of everything they depend on (``key``). It knows no rows and no thresholds."""
