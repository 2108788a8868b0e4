"""Imported last by the suite's forkserver (tests/forked_llog.py): S3's models parsed into
botocore's loader there once, so every broker and ``llog`` command forked from it makes
its S3 client without parsing them again (0.23 of a forked broker's 0.36 CPU-s to start)."""

from llog.store.s3 import warm_data_loader

warm_data_loader()
