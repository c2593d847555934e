"""Object-store failures as one-line errors naming the URL (bertprep.storage.stores).

pyarrow reports them as OSError (ArrowException for GCS) with the service's error code
in a long message; what the user must fix (a missing bucket, refused credentials) is a
`BertprepError`, what the store did wrong while a build ran (network, throttling, a
server error) a `StoreError`, after which the work done so far is kept for a rerun.
"""
from __future__ import annotations

import contextlib
import re

from bertprep.errors import BertprepError


class StoreError(BertprepError):
    """The store failed while the build ran (network, throttling, a server error): not
    the command's fault, so the work done so far is kept for the same command to resume."""


def one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


# What the user must fix (a BertprepError), by the error codes pyarrow's messages carry.
_PROBLEMS = (
    ("NO_SUCH_BUCKET", "the bucket does not exist"),
    ("NoSuchBucket", "the bucket does not exist"),
    ("ACCESS_DENIED", "access denied (check the credentials and the bucket's permissions)"),
    ("INVALID_ACCESS_KEY_ID", "the access key is not valid (check AWS_ACCESS_KEY_ID or AWS_PROFILE)"),
    ("SIGNATURE_DOES_NOT_MATCH", "the secret key does not match (check AWS_SECRET_ACCESS_KEY or AWS_PROFILE)"),
    ("OAuth2 access token", "no usable Google Cloud credentials (check GOOGLE_APPLICATION_CREDENTIALS, or run "
                            "`gcloud auth application-default login`)"),
)


def store_error(where, exc: BaseException) -> BertprepError:
    """One line naming the URL and the problem, for an error a store operation raised."""
    text = str(exc)
    for code, problem in _PROBLEMS:
        if code in text:
            return BertprepError(f"{where}: {problem}")
    if "NETWORK_CONNECTION" in text:
        return StoreError(f"{where}: cannot reach the object store (check the endpoint, e.g. AWS_ENDPOINT_URL, "
                          "and the network)")
    text = re.sub(r"\s*\(Request ID: [^)]*\)", "", one_line(exc))
    return StoreError(f"{where}: {text if len(text) <= 300 else text[:300] + '...'}")


@contextlib.contextmanager
def errors(where):
    """Store errors as one-line BertprepErrors; a missing object stays FileNotFoundError
    (callers treat it as absent)."""
    import pyarrow as pa

    try:
        yield
    except (FileNotFoundError, BertprepError):
        raise
    except (OSError, pa.ArrowException) as exc:
        raise store_error(where, exc) from None
