"""Data contracts (Arrow schemas, pandera models); they import no library code."""
