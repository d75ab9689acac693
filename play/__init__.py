"""The play window, behind the `python play.py` entry point: `window` (Player, the real-time loop
that reads input, steps the world model and draws it, and its Options), `live` (keyboard, mouse
and gamepad events -> action rows through a checkpoint's control spec, and the window's hotkeys),
`contexts` (the real context windows a game starts from), `session` (a played session saved as a
store), `real_game` (the gymnasium game beside the model on the same input) and `health` (the
live sharpness figure that warns when the frames go bad). PlayError is here."""

from dreamcade.dataset.errors import UserError


class PlayError(UserError):
    """A user mistake or a missing piece; the message names the file or option and the fix."""
