"""The artifact cache: built artifact files and their observations, content-addressed (``store``),
under a key of everything they depend on (``key``), trusted only when sealed with this user's key
(``secret``, ``sealed``) and reached without following links (``nofollow``). It knows no rows and
no thresholds."""
