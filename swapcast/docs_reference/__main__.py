import sys

from swapcast.docs_reference import main

sys.exit(main())
