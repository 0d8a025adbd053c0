"""Commands beside the live session: run, demo, doctor, calibrate, symbols."""
