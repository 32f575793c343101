"""Confluent Schema Registry's errors: an HTTP status, an ``error_code`` and a message
(``io.confluent.kafka.schemaregistry.rest.exceptions.Errors``), answered as
``{"error_code": ..., "message": ...}``."""

from __future__ import annotations

#: The last level of compatibility messages and ``GET /config`` answers.
LEVELS_MESSAGE = (
    "Invalid compatibility level. Valid values are none, backward, forward, full, "
    "backward_transitive, forward_transitive, and full_transitive"
)


class RegistryError(Exception):
    def __init__(self, status: int, code: int, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message

    def body(self) -> dict:
        return {"error_code": self.code, "message": self.message}


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(version: int) -> RegistryError:
    return RegistryError(404, 40402, f"Version {version} not found.")


def schema_not_found(schema_id: int | None = None) -> RegistryError:
    return RegistryError(404, 40403, "Schema not found" if schema_id is None else f"Schema {schema_id} not found")


def subject_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(404, 40404, f"Subject '{subject}' was soft deleted.Set permanent=true to delete permanently")


def subject_not_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(404, 40405, f"Subject '{subject}' was not deleted first before being permanently deleted")


def version_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(
        404, 40406, f"Subject '{subject}' Version {version} was soft deleted.Set permanent=true to delete permanently"
    )


def version_not_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(
        404, 40407, f"Subject '{subject}' Version {version} was not deleted first before being permanently deleted"
    )


def subject_config_not_set(subject: str) -> RegistryError:
    return RegistryError(404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured")


def subject_mode_not_set(subject: str) -> RegistryError:
    return RegistryError(404, 40409, f"Subject '{subject}' does not have subject-level mode configured")


def incompatible(subject: str, messages: list[str]) -> RegistryError:
    details = "[" + ", ".join(messages) + "]"  # Java's List.toString
    return RegistryError(
        409,
        409,
        f'Schema being registered is incompatible with an earlier schema for subject "{subject}", details: {details}',
    )


def invalid_schema(message: str) -> RegistryError:
    return RegistryError(422, 42201, message)


def invalid_version(version: str) -> RegistryError:
    return RegistryError(
        422,
        42202,
        f"The specified version '{version}' is not a valid version id. "
        'Allowed values are between [1, 2^31-1] and the string "latest"',
    )


def invalid_compatibility_level() -> RegistryError:
    return RegistryError(422, 42203, LEVELS_MESSAGE)


def invalid_mode(
    message: str = "Invalid mode. Valid values are READWRITE, READONLY, READONLY_OVERRIDE and IMPORT.",
) -> RegistryError:
    return RegistryError(422, 42204, message)


def not_permitted(message: str) -> RegistryError:
    return RegistryError(422, 42205, message)


def reference_exists(subject: str, version: int) -> RegistryError:
    return RegistryError(
        422,
        42206,
        f"One or more references exist to the schema {{magic=1,keytype=SCHEMA,subject={subject},version={version}}}.",
    )


def invalid_subject(subject: str) -> RegistryError:
    return RegistryError(422, 42208, f"The specified subject '{subject}' is not a valid.")


def schema_too_large() -> RegistryError:
    return RegistryError(422, 42209, "Register operation failed because schema is too large")


def store_error(message: str) -> RegistryError:
    return RegistryError(500, 50001, message)


def timed_out(message: str) -> RegistryError:
    return RegistryError(500, 50002, message)


def forwarding_failed(message: str) -> RegistryError:
    return RegistryError(500, 50003, message)


def unknown_leader(message: str) -> RegistryError:
    return RegistryError(500, 50004, message)
