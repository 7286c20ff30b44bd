"""``S3Storage``: job files in a bucket of any S3-compatible service (AWS S3, MinIO,
Cloudflare R2, ...), under an optional key prefix.

Credentials come from the standard AWS chain (``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY``, a profile, an instance role), never from swapcast's config.
With an ``endpoint_url`` (anything but AWS) keys are addressed path-style and checksums are
sent only where the API requires them, which is what S3-compatible services accept
everywhere. Transfers go through boto3's transfer manager: files at least
``MULTIPART_BYTES`` large move as multipart uploads and ranged downloads, streamed from and
to disk. botocore's errors become ``JobStorageError`` saying what to fix, and a missing key
``FileNotFoundError``, as for a local folder.

Imported only when ``jobs.storage`` is ``s3``: boto3 takes a moment to import.
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
from boto3.exceptions import S3UploadFailedError
from boto3.s3.transfer import TransferConfig
from botocore.config import Config as BotoConfig
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError
from botocore.exceptions import ConnectionError as BotoConnectionError

from signaling.jobs.settings import S3Location
from signaling.jobs.storage import (
    CANNOT_BE_A_FILE,
    OUTSIDE,
    JobStorage,
    JobStorageError,
    Readable,
    ScratchFolders,
    StoredFile,
)

MULTIPART_BYTES = 8 * 1024 * 1024
_TRANSFER = TransferConfig(multipart_threshold=MULTIPART_BYTES, multipart_chunksize=MULTIPART_BYTES, max_concurrency=4)
_MISSING = frozenset({"404", "NoSuchKey", "NotFound"})
_DENIED = frozenset({"403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken",
                     "ExpiredToken", "AuthorizationHeaderMalformed"})
_NO_CREDENTIALS = ("no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                   "(or another source of the AWS credential chain)")


class S3Storage(JobStorage):
    def __init__(self, location: S3Location) -> None:
        self.location = location
        self.bucket = location.bucket
        self.prefix = location.prefix.strip("/")
        compatible: dict[str, Any] = {
            "s3": {"addressing_style": "path"}, "request_checksum_calculation": "when_required",
            "response_checksum_validation": "when_required",
        } if location.endpoint_url is not None else {}
        config = BotoConfig(connect_timeout=5, read_timeout=60, retries={"max_attempts": 3, "mode": "standard"},
                            **compatible)
        try:
            self.client = boto3.session.Session().client(
                "s3", endpoint_url=location.endpoint_url, region_name=location.region, config=config
            )
        except (ValueError, BotoCoreError) as exc:  # e.g. an endpoint that is not a URL
            raise JobStorageError(f"job storage {self.where}: {exc}") from None
        self._scratch = ScratchFolders(Path(tempfile.gettempdir()) / "swapcast-scratch")

    @property
    def where(self) -> str:
        url = f"s3://{self.bucket}/{self.prefix}"
        return url + (f" at {self.location.endpoint_url}" if self.location.endpoint_url else "")

    def check(self) -> None:
        """Reachable, the bucket exists, the credentials are accepted (one HEAD request)."""
        with self._errors():
            self.client.head_bucket(Bucket=self.bucket)

    @property
    def scratch_folders(self) -> ScratchFolders:
        """``swapcast-scratch/`` in the system's temporary folder (``TMPDIR``)."""
        return self._scratch

    def put_file(self, local: Path, key: str) -> None:
        with self._errors():
            self.client.upload_file(str(local), self.bucket, self._full(key), Config=_TRANSFER)
        local.unlink()

    def fetch(self, key: str, scratch: Path) -> Path:
        target = scratch / "fetched" / key  # keys are unique, so files fetched into one scratch never collide
        target.parent.mkdir(parents=True, exist_ok=True)
        with self._errors(key):
            self.client.download_file(self.bucket, self._full(key), str(target), Config=_TRANSFER)
        return target

    def path(self, key: str) -> None:
        return None

    def stat(self, key: str) -> StoredFile:
        with self._errors(key):
            answer = self.client.head_object(Bucket=self.bucket, Key=self._full(key))
        return StoredFile(size=answer["ContentLength"], modified=answer["LastModified"], etag=answer["ETag"])

    def open(self, key: str, start: int = 0, stop: int | None = None) -> tuple[Readable, int]:
        """A part is one ranged GET; an empty part (S3 has no range for it) reads nothing."""
        if stop is not None and stop <= start:
            return io.BytesIO(), 0
        ranged = {} if start == 0 and stop is None else {"Range": f"bytes={start}-{'' if stop is None else stop - 1}"}
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=self._full(key), **ranged)
        except ClientError as exc:
            if _code(exc) == "InvalidRange":  # ``start`` at or past the end (an empty object has no byte 0)
                return io.BytesIO(), 0
            raise self._translated(exc, key) from None
        except BotoCoreError as exc:
            raise self._translated(exc, key) from None
        return answer["Body"], answer["ContentLength"]

    def delete(self, key: str) -> None:
        with self._errors():
            self.client.delete_object(Bucket=self.bucket, Key=self._full(key))

    def delete_folder(self, folder: str) -> None:
        with self._errors():
            for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self._full(folder) + "/"
            ):
                keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]  # at most 1000: one request
                if keys:
                    answer = self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": keys, "Quiet": True})
                    if answer.get("Errors"):
                        error = answer["Errors"][0]
                        raise JobStorageError(f"job storage {self.where}: cannot delete {error['Key']}: {error['Message']}")

    def key_of(self, path: str) -> str:
        """A key as given: relative, without empty, ``.`` or ``..`` parts (S3 has no folders
        to resolve them in, so they could only alias another key or reach above the prefix)."""
        if "\0" in path:
            raise ValueError(CANNOT_BE_A_FILE)
        if not path or path.startswith("/") or any(part in ("", ".", "..") for part in path.split("/")):
            raise ValueError(OUTSIDE)
        return path

    def _full(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    @contextmanager
    def _errors(self, key: str | None = None) -> Iterator[None]:
        try:
            yield
        except (S3UploadFailedError, ClientError, BotoCoreError) as exc:
            raise self._translated(exc, key) from None

    def _translated(self, exc: Exception, key: str | None) -> Exception:
        """botocore's error as ``JobStorageError`` saying what to fix, or ``FileNotFoundError``
        for a missing ``key``."""
        if isinstance(exc, S3UploadFailedError) and isinstance(exc.__context__, ClientError):
            exc = exc.__context__  # boto3 wraps the ClientError of an upload
        if isinstance(exc, ClientError):
            code = _code(exc)
            if key is not None and code in _MISSING:
                return FileNotFoundError(f"{key}: not in the job storage")
            if code in ("NoSuchBucket", "404"):  # HEAD answers carry no error code, only the status
                what = f"the bucket {self.bucket!r} does not exist"
            elif code in _DENIED:
                what = (f"access denied ({code}): check the credentials (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY) "
                        "and the bucket's permissions")
            else:
                what = f"{code}: {exc.response.get('Error', {}).get('Message') or exc}"
        elif isinstance(exc, NoCredentialsError):
            what = _NO_CREDENTIALS
        elif isinstance(exc, BotoConnectionError):  # refused, timed out, TLS failed
            what = f"the endpoint cannot be reached ({exc})"
        else:
            what = str(exc)
        return JobStorageError(f"job storage {self.where}: {what}")


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))
