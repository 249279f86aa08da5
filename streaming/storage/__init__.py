"""Where the lake and the checkpoints live: a local folder or an S3 bucket, one way to reach it.

`uri.py` parses TIDELAKE_LAKE / TIDELAKE_CHECKPOINTS (cheap: every command imports it);
`location.py` gives the file operations the engine needs on either; `s3_settings.py` is the one
home of the AWS settings (credentials, endpoint, region) for every client (delta-rs, pyarrow,
Spark's s3a, boto3); `conditional_put.py` refuses a store that would let two commits of one
Delta version both succeed.
"""
