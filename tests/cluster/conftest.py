import sys
from pathlib import Path

# the cluster is driven by the same clients as the single node: aiortc peers (tests/webrtc)
# and Chromium (tests/browser)
for helpers in ("webrtc", "browser"):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / helpers))
