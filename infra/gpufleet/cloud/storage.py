"""Shared storage: FSx for Lustre sized by the plan, and the S3 data bucket behind it.

The file system is PERSISTENT_2 (encrypted at rest, with the KMS key the stack names or
FSx's default key), LZ4-compressed, in the compute subnet with the Lustre security group.
pulumi-aws 7.51 has no `deletion_protection` on `LustreFileSystem`, so the resource is
`protect=True`. Data repository associations link file-system paths to bucket prefixes: at most
8 per file system, paths must not overlap. FSx takes no backups of a file system linked to S3
(gpufleet.aws_rules.FSX_BACKUP_SOURCE), so a linked one asks for none and skips the final backup:
the versioned bucket, fed by auto-export, is the durable copy. Intelligent-Tiering takes no S3
links at all (FSX_TIERING_SOURCE), a user-provisioned metadata server and a read cache.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from gpufleet import tagging as t
from gpufleet.aws_rules import bucket_prefix
from gpufleet.errors import ConfigError
from gpufleet.plan.model import StoragePlan
from gpufleet.spec import StorageConfig

MAX_ASSOCIATIONS = 8  # FSx for Lustre quota: data repository associations per file system
DEFAULT_PREFIXES = {"datasets": ("import",), "checkpoints": ("export",)}
LUSTRE_VERSION = "2.15"  # EFA-enabled file systems need 2.15
EVENTS = ["NEW", "CHANGED", "DELETED"]
TIERING_METADATA_IOPS = 6000  # Intelligent-Tiering: USER_PROVISIONED metadata at 6000 or 12000 IOPS (pulumi-aws docs)
BACKUP_RETENTION_DAYS = 7  # only on a file system without S3 links


@dataclass(frozen=True)
class RepositoryLink:
    """One data repository association: a file-system path and its bucket prefix."""

    file_system_path: str
    prefix: str
    directions: tuple[str, ...]  # "import" and/or "export"


def _split_s3(url: str) -> tuple[str, str]:
    rest = url.removeprefix("s3://")
    bucket, _, prefix = rest.partition("/")
    return bucket, prefix.strip("/")


def data_bucket_name(storage: StorageConfig) -> str | None:
    """The bucket the stack's import/export paths name (one bucket for both), or None."""
    buckets = {_split_s3(u)[0] for u in (storage.import_path, storage.export_path) if u}
    if len(buckets) > 1:
        raise ConfigError("importPath and exportPath name different buckets", field="gpufleet:storage",
                          expected="one data bucket for both paths")
    return buckets.pop() if buckets else None


def repository_links(storage: StorageConfig) -> list[RepositoryLink]:
    """The associations from the stack's paths (or the default prefixes), validated."""
    wanted: dict[str, set[str]] = {}
    paths = [(storage.import_path, "import"), (storage.export_path, "export")]
    if not any(u for u, _ in paths):
        for prefix, dirs in DEFAULT_PREFIXES.items():
            wanted[prefix] = set(dirs)
    for url, direction in paths:
        if url:
            wanted.setdefault(_split_s3(url)[1], set()).add(direction)
    links = [RepositoryLink(posixpath.join("/", prefix) if prefix else "/", prefix, tuple(sorted(dirs)))
             for prefix, dirs in sorted(wanted.items())]
    validate_links(links)
    return links


def validate_links(links: list[RepositoryLink]) -> None:
    if len(links) > MAX_ASSOCIATIONS:
        raise ConfigError(f"{len(links)} data repository associations", field="gpufleet:storage",
                          expected=f"at most {MAX_ASSOCIATIONS} per file system")
    for i, a in enumerate(links):
        for b in links[i + 1:]:
            pa, pb = a.file_system_path.rstrip("/") + "/", b.file_system_path.rstrip("/") + "/"
            if pa.startswith(pb) or pb.startswith(pa):
                raise ConfigError(f"file-system paths {a.file_system_path} and {b.file_system_path} overlap",
                                  field="gpufleet:storage", expected="non-overlapping paths such as /datasets and /checkpoints")


class Storage(pulumi.ComponentResource):
    """FSx for Lustre, the data bucket (private, encrypted, versioned) and their associations."""

    def __init__(self, name: str, plan: StoragePlan, config: StorageConfig, subnet_id: pulumi.Input[str],
                 security_group_ids: list[pulumi.Input[str]], tags: dict[str, str],
                 kms_key_id: str | None = None, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:storage:Storage", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tiering = plan.storage_class == "INTELLIGENT_TIERING"
        wanted = repository_links(config)
        self.prefixes = [link.prefix for link in wanted]  # the nodes' bucket access, linked or not
        self.links = [] if tiering else wanted
        bucket_name = data_bucket_name(config)
        self.bucket = aws.s3.Bucket(f"{name}-data", bucket=bucket_name,
                                    bucket_prefix=None if bucket_name else bucket_prefix(tags[t.CLUSTER]),
                                    tags=t.with_role(tags, "data-bucket"), opts=child)
        aws.s3.BucketPublicAccessBlock(f"{name}-data-pab", bucket=self.bucket.id, block_public_acls=True,
                                       block_public_policy=True, ignore_public_acls=True,
                                       restrict_public_buckets=True, opts=child)
        aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-data-sse", bucket=self.bucket.id,
            rules=[aws.s3.BucketServerSideEncryptionConfigurationRuleArgs(
                apply_server_side_encryption_by_default=aws.s3.BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                    sse_algorithm="aws:kms" if kms_key_id else "AES256", kms_master_key_id=kms_key_id),
                bucket_key_enabled=bool(kms_key_id))], opts=child)
        aws.s3.BucketVersioning(f"{name}-data-versioning", bucket=self.bucket.id,
                                versioning_configuration=aws.s3.BucketVersioningVersioningConfigurationArgs(
                                    status="Enabled"), opts=child)
        backups = not self.links
        self.file_system = aws.fsx.LustreFileSystem(
            f"{name}-lustre", deployment_type="PERSISTENT_2", storage_type=plan.storage_class,
            storage_capacity=plan.capacity_gib,
            per_unit_storage_throughput=None if tiering else plan.throughput_per_tib,
            throughput_capacity=plan.aggregate_throughput_mbs if tiering else None,
            data_compression_type="LZ4", file_system_type_version=LUSTRE_VERSION, kms_key_id=kms_key_id,
            efa_enabled=plan.efa_enabled or None,
            metadata_configuration=(
                aws.fsx.LustreFileSystemMetadataConfigurationArgs(mode="USER_PROVISIONED", iops=TIERING_METADATA_IOPS)
                if tiering else aws.fsx.LustreFileSystemMetadataConfigurationArgs(mode="AUTOMATIC")
                if plan.efa_enabled else None),
            data_read_cache_configuration=(aws.fsx.LustreFileSystemDataReadCacheConfigurationArgs(
                sizing_mode="PROPORTIONAL_TO_THROUGHPUT_CAPACITY") if tiering else None),
            subnet_ids=subnet_id, security_group_ids=security_group_ids,
            automatic_backup_retention_days=BACKUP_RETENTION_DAYS if backups else 0,
            copy_tags_to_backups=backups, skip_final_backup=not backups,
            final_backup_tags={**tags, t.ROLE: "lustre-final-backup"} if backups else None,
            tags=t.with_role(tags, "lustre", f"{name}-lustre"),
            opts=pulumi.ResourceOptions(parent=self, protect=True))
        for link in self.links:
            auto = aws.fsx.DataRepositoryAssociationS3Args(
                auto_import_policy=(aws.fsx.DataRepositoryAssociationS3AutoImportPolicyArgs(events=EVENTS)
                                    if "import" in link.directions else None),
                auto_export_policy=(aws.fsx.DataRepositoryAssociationS3AutoExportPolicyArgs(events=EVENTS)
                                    if "export" in link.directions else None))
            aws.fsx.DataRepositoryAssociation(
                f"{name}-dra-{link.prefix.replace('/', '-') or 'root'}", file_system_id=self.file_system.id,
                file_system_path=link.file_system_path,
                data_repository_path=self.bucket.bucket.apply(lambda b, p=link.prefix: f"s3://{b}/{p}".rstrip("/") + "/"),
                batch_import_meta_data_on_create="import" in link.directions, s3=auto,
                delete_data_in_filesystem=False, tags=t.with_role(tags, "data-repository"), opts=child)
        self.register_outputs({"fileSystemId": self.file_system.id, "dnsName": self.file_system.dns_name,
                               "mountName": self.file_system.mount_name, "bucket": self.bucket.bucket})
