"""One storage layer: fsspec URL resolution, bounded retries, one transient-error classifier.

Every read of raw logs, datasets and run folders that may live on object storage goes through
here: `resolve_fs` (a path or URL -> an fsspec filesystem, s3 with bounded timeouts),
`call_with_retries` (exponential backoff, tenacity), `is_transient` (the one rule for what is
worth retrying), `explain_location_error` (the one mapping of storage errors to a one-line
`UserError`) and `open_input` / `read_input` (local files through `platform_lib.fsguard`).
Flyte knows nothing of this module: `tasks/errors.py` maps transient errors to
`FlyteRecoverableException`.
"""

from __future__ import annotations

import errno
import os
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

import fsspec
import tenacity
from fsspec.implementations.local import LocalFileSystem

from platform_lib.errors import UserError
from platform_lib.fsguard import open_regular, read_regular
from platform_lib.redact import has_userinfo, mask_userinfo

__all__ = [
    "LOCAL_PROTOCOLS",
    "StorageAccessError",
    "StorageURLError",
    "StorageUnreachableError",
    "call_with_retries",
    "check_endpoint_url",
    "default_retries",
    "explain_location_error",
    "explain_storage_error",
    "fetch_folder",
    "is_local_url",
    "is_transient",
    "iter_causes",
    "open_input",
    "read_input",
    "resolve_fs",
    "retry_delay_s",
    "s3_config_kwargs",
    "storage_deadline_s",
]

T = TypeVar("T")

#: fsspec protocols that are the local file system.
LOCAL_PROTOCOLS = frozenset({"file", "local"})

#: errno values of errors worth retrying: network, contention, stale handles.
_TRANSIENT_ERRNOS = frozenset(
    {
        errno.ECONNRESET,
        errno.ECONNREFUSED,
        errno.ECONNABORTED,
        errno.ETIMEDOUT,
        errno.EPIPE,
        errno.EAGAIN,
        errno.EBUSY,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
        errno.ENETDOWN,
        errno.ENETRESET,
        errno.ESTALE,
        errno.EREMOTEIO,
    }
)
#: errno values that retrying cannot fix.
_PERMANENT_ERRNOS = frozenset(
    {
        errno.ENOENT,
        errno.EACCES,
        errno.EPERM,
        errno.ENOSPC,
        errno.EDQUOT,
        errno.EFBIG,
        errno.ENOTDIR,
        errno.EISDIR,
        errno.ENAMETOOLONG,
        errno.ELOOP,
        errno.EROFS,
        errno.EINVAL,
    }
)
#: Exception class names (anywhere in the MRO) of transient network errors of the HTTP
#: stacks fsspec backends use: botocore/aiobotocore (s3fs), aiohttp (s3fs, gcsfs, http),
#: urllib3/requests. Matched by name so that none of them must be installed.
_TRANSIENT_CLASSES = frozenset(
    {
        "EndpointConnectionError",
        "ConnectTimeoutError",
        "ReadTimeoutError",
        "ConnectionClosedError",
        "ProxyConnectionError",
        "ResponseStreamingError",
        "IncompleteReadError",
        "ClientConnectionError",
        "ClientConnectorError",
        "ServerDisconnectedError",
        "ServerTimeoutError",
        "ClientPayloadError",
        "FSTimeoutError",
        "NewConnectionError",
        "ProtocolError",
        "ConnectTimeout",
        "ReadTimeout",
    }
)
#: Exception class names of missing or unusable credentials (botocore, google-auth).
_CREDENTIAL_CLASSES = frozenset(
    {
        "NoCredentialsError",
        "PartialCredentialsError",
        "CredentialRetrievalError",
        "UnknownCredentialError",
        "NoAuthTokenError",
        "DefaultCredentialsError",
        "RefreshError",
    }
)
#: S3 error codes (and HTTP statuses) of throttling and unavailability.
_TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestLimitExceeded",
        "TooManyRequests",
        "TooManyRequestsException",
        "ServiceUnavailable",
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "429",
        "500",
        "502",
        "503",
        "504",
    }
)
#: S3 error codes of bad credentials or denied access.
_ACCESS_CODES = frozenset(
    {
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
        "TokenRefreshRequired",
        "AllAccessDisabled",
        "AccountProblem",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "401",
        "403",
    }
)
#: Seconds to wait for a TCP connection to an s3 store.
S3_CONNECT_TIMEOUT_S = 5.0
#: Seconds to wait for each read of an s3 store's answer (`$DRIVETRAIN_STORAGE_TIMEOUT_S`).
S3_READ_TIMEOUT_S = 15.0
#: botocore retries of one s3 request (2 attempts). s3fs's own retry loop makes 1 try of them
#: (botocore and `call_with_retries` retry), so a silent store fails a request in 2 x timeout.
S3_BOTOCORE_RETRIES = 1
S3FS_TRIES = 1
#: Seconds after the first attempt of `call_with_retries` after which no attempt starts
#: (`$DRIVETRAIN_STORAGE_DEADLINE_S`).
STORAGE_DEADLINE_S = 60.0


class StorageUnreachableError(ConnectionError):
    """A transient storage error persisted through every retry (still transient: retry later)."""


class StorageAccessError(UserError):
    """Missing or bad credentials, or access denied, for a storage URL (not transient)."""


class StorageURLError(UserError):
    """A path or URL that names no usable storage location: unknown scheme, malformed, bad bucket."""

    def __init__(self, url: str, reason: str) -> None:
        self.url, self.reason = url, reason
        super().__init__(
            f"not a usable storage location ({reason})",
            url,
            "give a local path or a URL such as s3://bucket/prefix, gs://bucket/prefix, "
            "https://host/path or file:///path (its fsspec backend installed); credentials go "
            "in the environment, never in the URL",
        )


def iter_causes(exc: BaseException) -> Iterator[BaseException]:
    """Yield `exc` and its `__cause__` / `__context__` chain (each exception once)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _class_names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def _error_code(exc: BaseException) -> tuple[str, str]:
    """Return (S3 error code, HTTP status) of a botocore ClientError-like exception, or ("", "")."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return "", ""
    code = str((response.get("Error") or {}).get("Code", ""))
    status = str((response.get("ResponseMetadata") or {}).get("HTTPStatusCode", ""))
    return code, status


def _is_access_problem(exc: BaseException) -> bool:
    code, status = _error_code(exc)
    return bool(
        _class_names(exc) & _CREDENTIAL_CLASSES
        or code in _ACCESS_CODES
        or status in ("401", "403")
        or isinstance(exc, PermissionError)
    )


def is_transient(exc: BaseException) -> bool:
    """Return True when retrying may fix `exc` (network, timeouts, throttling), False otherwise.

    Looks at `exc` and its cause chain: s3fs re-raises a throttled request (botocore
    `ClientError` "SlowDown", HTTP 503) as `OSError(EBUSY)` with the ClientError as cause.
    Missing paths, permissions, credentials, full disks and bad data are never transient.

        transient   connection refused / reset / aborted, timeouts (socket, asyncio, botocore's
                    EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError,
                    ConnectionClosedError), throttling and unavailability (HTTP 429, 500, 502,
                    503, 504; S3 SlowDown, Throttling, RequestTimeout), stale NFS handles
        permanent   missing objects or folders, access denied, missing or bad credentials, full
                    disks, bad data (retrying cannot fix them)
    """
    for err in iter_causes(exc):  # the outermost error that says either way decides
        if isinstance(err, StorageUnreachableError):
            return True
        if _is_permanent(err):
            return False
        code, status = _error_code(err)
        if (
            code in _TRANSIENT_CODES
            or status in _TRANSIENT_CODES
            or _class_names(err) & _TRANSIENT_CLASSES
            or isinstance(err, ConnectionError | TimeoutError)
            or (isinstance(err, OSError) and err.errno in _TRANSIENT_ERRNOS)
        ):
            return True
    return False


def _is_permanent(err: BaseException) -> bool:
    return (
        _is_access_problem(err)
        or isinstance(err, FileNotFoundError | IsADirectoryError | NotADirectoryError | UserError)
        or (isinstance(err, OSError) and err.errno in _PERMANENT_ERRNOS)
    )


def explain_storage_error(exc: BaseException, url: str) -> StorageAccessError | None:
    """Return a one-line `StorageAccessError` for a credentials/permission problem, else None.

    The message names `url`, the cause, and how to supply credentials for its protocol.
    """
    problems = []
    for err in iter_causes(exc):
        if isinstance(err, StorageAccessError):
            return err
        if _is_access_problem(err) and not (isinstance(err, PermissionError) and is_local_url(url)):
            problems.append(err)
    if not problems:
        return None
    err = next((e for e in problems if _error_code(e)[0]), problems[0])  # prefer the S3 error code
    code, _ = _error_code(err)
    text = (str(err).strip() or "access denied").splitlines()[0]
    return StorageAccessError(
        f"cannot access storage ({type(err).__name__}{f' {code}' if code else ''}: {text})",
        url,
        _credentials_hint(url),
    )


def _first_words(exc: BaseException, limit: int = 300) -> str:
    """Return `exc`'s message on one line (whitespace folded, at most `limit` characters)."""
    return " ".join(str(exc).split())[:limit] or type(exc).__name__


def explain_location_error(exc: BaseException, url: str) -> UserError | None:
    """Return the one-line `UserError` of a storage error at `url`, else None (not a storage error).

    Maps, looking at `exc` and its causes: a `UserError` (as is); missing or bad credentials
    and denied access (`explain_storage_error`); an invalid bucket name (botocore's
    `ParamValidationError`, raised at the first request) to `StorageURLError`; and an
    unreachable store (`StorageUnreachableError`, or any transient error, `is_transient`) to
    "cannot reach storage" with the fix. Callers that retry transient errors map after retrying.
    """
    access = explain_storage_error(exc, url)
    if access is not None:
        return access
    for err in iter_causes(exc):
        if isinstance(err, UserError):
            return err
        if "ParamValidationError" in _class_names(err):  # its text quotes the URL: not repeated
            name = "bucket name" if "bucket name" in str(err) else "request parameters"
            return StorageURLError(url, f"invalid {name}: the store refused them")
    if is_transient(exc):
        what, _, fix = str(exc).rpartition("; ")
        if isinstance(exc, StorageUnreachableError) and what:
            return UserError(what, url, fix)
        return UserError(
            f"cannot reach storage ({type(exc).__name__}: {_first_words(exc)})",
            url,
            "check the endpoint (its address, AWS_ENDPOINT_URL for s3), the network and that "
            "the server is up and answers, then retry",
        )
    return None


def _credentials_hint(url: str) -> str:
    protocol = url.split("://", 1)[0] if "://" in url else "file"
    if protocol in ("s3", "s3a"):
        return (
            "supply credentials that may read it: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
            "(or AWS_PROFILE / an instance role), and AWS_ENDPOINT_URL for an S3-compatible server"
        )
    if protocol in ("gs", "gcs"):
        return "supply credentials that may read it: GOOGLE_APPLICATION_CREDENTIALS or `gcloud auth application-default login`"
    if protocol in ("abfs", "az", "adl"):
        return "supply credentials that may read it: AZURE_STORAGE_CONNECTION_STRING or AZURE_STORAGE_ACCOUNT_KEY"
    return "check the credentials and permissions for this location"


def is_local_url(url: str | os.PathLike[str]) -> bool:
    """Return True for a local path or `file://` / `local://` URL."""
    text = os.fspath(url)
    return "://" not in text or text.split("://", 1)[0] in LOCAL_PROTOCOLS


def _env_seconds(name: str, default: float) -> float:
    """Return the seconds `$name` gives (default `default`), refusing a bad value in one line."""
    text = os.environ.get(name, "")
    try:
        value = float(text) if text.strip() else default
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        raise UserError(
            "not a number of seconds in (0, 3600]",
            f"{name}={text}",
            f"unset it or set it to e.g. {default:g}",
        )
    return value


def _s3_config(read_s: float) -> dict[str, Any]:
    return {
        "connect_timeout": min(S3_CONNECT_TIMEOUT_S, read_s),
        "read_timeout": read_s,
        "retries": {"max_attempts": S3_BOTOCORE_RETRIES},
    }


def s3_config_kwargs() -> dict[str, Any]:
    """Return the botocore `Config` arguments of an s3 filesystem: timeouts in s, retries.

    Connect timeout `S3_CONNECT_TIMEOUT_S`, read timeout `$DRIVETRAIN_STORAGE_TIMEOUT_S`
    (default `S3_READ_TIMEOUT_S`), `S3_BOTOCORE_RETRIES` retries.

    Raises:
        UserError: `$DRIVETRAIN_STORAGE_TIMEOUT_S` is not a number of seconds in (0, 3600].
    """
    return _s3_config(_env_seconds("DRIVETRAIN_STORAGE_TIMEOUT_S", S3_READ_TIMEOUT_S))


def storage_deadline_s() -> float:
    """Return the seconds after which `call_with_retries` starts no new attempt.

    `$DRIVETRAIN_STORAGE_DEADLINE_S`, default `STORAGE_DEADLINE_S`.

    Raises:
        UserError: the variable is not a number of seconds in (0, 3600].
    """
    return _env_seconds("DRIVETRAIN_STORAGE_DEADLINE_S", STORAGE_DEADLINE_S)


# Every s3 filesystem of the process, also those made outside `resolve_fs` (checkpoints,
# torch's fsspec writer), gets bounded timeouts by default (fsspec's per-protocol config);
# explicit `config_kwargs` win.
fsspec.config.conf.setdefault("s3", {}).setdefault("config_kwargs", _s3_config(S3_READ_TIMEOUT_S))


def check_endpoint_url(storage_options: dict[str, Any]) -> None:
    """Refuse an s3 endpoint URL that holds credentials (`http://user:password@host`).

    Looks at `storage_options` (`endpoint_url`, `client_kwargs.endpoint_url`), at fsspec's
    s3 defaults (`$FSSPEC_S3_ENDPOINT_URL`) and at `$AWS_ENDPOINT_URL` /
    `$AWS_ENDPOINT_URL_S3`, which botocore reads.

    Raises:
        UserError: an endpoint URL with userinfo (named with the userinfo masked).
    """
    client = storage_options.get("client_kwargs")
    endpoints = {
        "endpoint_url": storage_options.get("endpoint_url"),
        "FSSPEC_S3_ENDPOINT_URL": fsspec.config.conf.get("s3", {}).get("endpoint_url"),
        "client_kwargs.endpoint_url": client.get("endpoint_url")
        if isinstance(client, dict)
        else None,
        "AWS_ENDPOINT_URL": os.environ.get("AWS_ENDPOINT_URL"),
        "AWS_ENDPOINT_URL_S3": os.environ.get("AWS_ENDPOINT_URL_S3"),
    }
    for name, endpoint in endpoints.items():
        if endpoint and has_userinfo(str(endpoint)):
            raise UserError(
                "the S3 endpoint URL holds credentials (user:password@)",
                f"{name}={mask_userinfo(str(endpoint))}",
                "remove them from the URL; give credentials as AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, an instance role)",
            )


def resolve_fs(
    url: str | os.PathLike[str], storage_options: dict[str, Any] | None = None
) -> tuple[fsspec.AbstractFileSystem, str, bool]:
    """Return (filesystem, root path inside it without trailing "/", is_local) of a path or URL.

    s3 URLs get bounded timeouts and attempts (`s3_config_kwargs`) unless `storage_options`
    sets `config_kwargs`, and s3fs's own retry loop makes `S3FS_TRIES` tries (or
    `storage_options["retries"]`): a store that accepts connections and never answers fails
    one request after at most 2 x the read timeout.

    Raises:
        StorageURLError: an unknown scheme, a malformed URL (`http://[::1`) or a scheme whose
            backend is not installed.
        UserError: credentials in an s3 endpoint URL (`check_endpoint_url`), or
            `$DRIVETRAIN_STORAGE_TIMEOUT_S` is not a number of seconds.
        OSError: a backend that connects at once (ftp, sftp) could not.
    """
    text = os.fspath(url)
    options = dict(storage_options or {})
    is_s3 = "://" in text and text.split("://", 1)[0] in ("s3", "s3a")
    tries = int(options.pop("retries", S3FS_TRIES)) if is_s3 else 0
    if is_s3:
        options.setdefault("config_kwargs", s3_config_kwargs())
        check_endpoint_url(options)
    try:
        if "://" in text:
            urllib.parse.urlsplit(text)  # a malformed host fails here, not at the first read
        fs, root = fsspec.core.url_to_fs(text, **options)
    except (ValueError, ImportError) as exc:  # unknown protocol, bad URL, backend missing
        raise StorageURLError(text, _first_words(exc)) from exc
    if is_s3 and hasattr(fs, "retries"):
        fs.retries = max(tries, 1)  # s3fs's retry loop: a class attribute, not an option
    return fs, root.rstrip("/") or root, is_local_url(text)


def open_input(fs: fsspec.AbstractFileSystem, path: str, *, root: str | None = None) -> IO[bytes]:
    """Open `path` of `fs` for binary reading; a local file only when it is a regular file.

    A local path goes through `fsguard.open_regular` (non-blocking open + fstat: a FIFO,
    device, socket or folder is refused before a byte is read; with `root`, the opened file
    must lie inside that folder); others through `fs.open`.

    Raises:
        NotRegularFileError: a local path that is not a regular file (names the path).
        PathOutsideRootError: the opened local file lies outside `root`.
        OSError: the open failed (missing file, permission, store errors).
    """
    if isinstance(fs, LocalFileSystem):
        return os.fdopen(open_regular(path, root=root), "rb")
    return fs.open(path, "rb")


def read_input(
    fs: fsspec.AbstractFileSystem, path: str, *, max_bytes: int, root: str | None = None
) -> bytes:
    """Return the bytes of `path` of `fs`, refusing a file over `max_bytes` (before reading it all).

    A local path goes through `fsguard.read_regular` (with `root`: the opened file must lie
    inside that folder); a remote one is fetched with one ranged read of at most
    `max_bytes + 1` bytes.

    Raises:
        NotRegularFileError: a local path that is not a regular file (names the path).
        PathOutsideRootError: the opened local file lies outside `root`.
        UserError: the file holds more than `max_bytes` bytes.
        OSError: the read failed (missing file, permission, store errors).
    """
    if isinstance(fs, LocalFileSystem):
        return read_regular(path, max_bytes=max_bytes, root=root)
    data = fs.cat_file(path, start=0, end=max_bytes + 1)
    if len(data) > max_bytes:
        raise UserError(
            f"file holds more than the {max_bytes} bytes allowed",
            fs.unstrip_protocol(path),
            "check that this is the file you meant; it is too large to be one",
        )
    return data


#: Longest delay between two attempts of a storage request, in s.
RETRY_DELAY_CAP_S = 8.0


def retry_delay_s(attempt: int, backoff_s: float) -> float:
    """Return the wait after failed attempt `attempt` (1 = the first) before the next, in s.

    `backoff_s * 2 ** (attempt - 1)`, capped at `RETRY_DELAY_CAP_S`: the schedule of
    `call_with_retries` (and of `platform_lib.loading.fleet`, which models it).
    """
    return min(backoff_s * 2.0 ** (attempt - 1), RETRY_DELAY_CAP_S)


def default_retries() -> int:
    """Return the retries of a storage request: `$DRIVETRAIN_STORAGE_RETRIES`, default 4."""
    return int(os.environ.get("DRIVETRAIN_STORAGE_RETRIES", "4"))


def call_with_retries(
    fn: Callable[[], T],
    *,
    what: str,
    url: str,
    max_retries: int | None = None,
    backoff_s: float = 0.5,
    deadline_s: float | None = None,
) -> T:
    """Run `fn`, retrying transient errors (`is_transient`) with exponential backoff.

    Args:
        fn: the storage operation.
        what: the operation, for messages ("reading manifest.json").
        url: the location operated on, named in messages.
        max_retries: retries after the first attempt (0: no retry); None: `default_retries()`.
        backoff_s: first delay, doubled per retry, capped at 8 s.
        deadline_s: no retry starts this many seconds after the first attempt began (a silent
            store times out each attempt); None: `storage_deadline_s()`.

    Raises:
        StorageUnreachableError: a transient error persisted through `max_retries` retries or
            past `deadline_s`.
        StorageAccessError: missing/bad credentials or access denied (never retried).
        Exception: any other error of `fn`, unchanged, on its first occurrence.
    """
    max_retries = default_retries() if max_retries is None else max_retries
    deadline_s = storage_deadline_s() if deadline_s is None else deadline_s
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(max_retries + 1) | tenacity.stop_after_delay(deadline_s),
        wait=lambda state: retry_delay_s(state.attempt_number, backoff_s),
        retry=tenacity.retry_if_exception(is_transient),
        reraise=True,
    )
    try:
        return retrying(fn)
    except Exception as exc:
        access = explain_storage_error(exc, url)
        if access is not None and access is not exc:
            raise access from exc
        if not is_transient(exc) or isinstance(exc, StorageUnreachableError):
            raise
        attempts = retrying.statistics.get("attempt_number", max_retries + 1)
        raise StorageUnreachableError(
            f"{what} {url} failed after {attempts} attempts ({type(exc).__name__}: "
            f"{_first_words(exc)}); check the endpoint and the network, then retry"
        ) from exc


def fetch_folder(
    url: str,
    workdir: str | os.PathLike[str],
    *,
    max_retries: int | None = None,
    storage_options: dict[str, Any] | None = None,
) -> Path:
    """Return a local folder with the contents of `url`: itself when local, else a download.

    Args:
        url: local folder, `file://` URL or fsspec URL of a folder (`s3://bucket/logs/`).
        workdir: local scratch folder receiving a download (as `workdir/<last part of url>`).
        max_retries: retries of transient errors (see `call_with_retries`).
        storage_options: extra fsspec options.

    Raises:
        FileNotFoundError: the location does not exist or is not a folder.
        StorageAccessError: missing/bad credentials or access denied.
        StorageUnreachableError: the store did not answer after the retries.
    """
    fs, root, local = resolve_fs(url, storage_options)
    is_dir = call_with_retries(
        lambda: fs.isdir(root), what="listing", url=url, max_retries=max_retries
    )
    if not is_dir:
        raise FileNotFoundError(errno.ENOENT, "no such folder", url)
    if local:
        return Path(root)
    target = Path(workdir) / (root.rstrip("/").rsplit("/", 1)[-1] or "download")
    call_with_retries(
        lambda: fs.get(root + "/", str(target), recursive=True),
        what="downloading",
        url=url,
        max_retries=max_retries,
    )
    return target
