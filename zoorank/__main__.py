import sys

from zoorank.cli import main

sys.exit(main())
