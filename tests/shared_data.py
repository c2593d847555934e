"""Where the shared real data lives: ../shared/data beside the checkout (CI has it
there too). Tests that read it skip with a reason when it is absent."""
import pathlib

SHARED_DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data"
