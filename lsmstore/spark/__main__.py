"""``python -m lsmstore.spark import|export|gc ...`` (also a spark-submit application)."""

import sys

from lsmstore.spark.jobs import main

if __name__ == "__main__":
    sys.exit(main())
