"""The names of Beam's own pipeline options, known without importing Beam.

A misspelt flag is refused, naming the closest flag, before a job imports Beam (about 2 CPU s).
The names are those of every ``PipelineOptions`` class defined once the jobs' modules are imported,
and of Beam's ``DaskOptions``; ``tests/cli/test_beam_flag_names.py`` keeps the list equal to what
the installed Beam defines. Beam's own parser checks their values once the job imports Beam.
"""

from __future__ import annotations

__all__ = ["BEAM_FLAG_NAMES"]

# As Beam 2.77.0 defines them.
BEAM_FLAG_NAMES = frozenset((
    "allow_non_deterministic_key_coders", "allow_unsafe_triggers", "application_id", "artifact_endpoint",
    "artifact_port", "artifacts_dir", "auto_unique_labels", "autoscaling_algorithm",
    "azure_connection_string", "azure_managed_identity_client_id", "beam_plugin", "beam_plugins",
    "beam_services", "blob_service_endpoint", "bootstrap_servers", "cloud_build_machine_type",
    "create_from_snapshot",
    # Beam's DaskOptions, registered when a command line asks for Dask (beam_compat.register_dask_options).
    "dask_client_address", "dask_client_name", "dask_connection_limit", "dask_connection_timeout",
    "dask_npartitions", "dask_partition_size", "dask_scheduler_file",
    "dataflow_endpoint", "dataflow_job_file", "dataflow_kms_key",
    "dataflow_service_option", "dataflow_service_options", "default_sdk_harness_log_level",
    "direct_embed_docker_python", "direct_num_workers", "direct_runner_bundle_repeat",
    "direct_running_mode", "direct_test_splits", "disable_beartype", "disk_provisioned_iops",
    "disk_provisioned_throughput_mibps", "disk_size_gb", "disk_type", "docker_registry_push_url", "dry_run",
    "element_processing_timeout_minutes", "enable_artifact_caching", "enable_bucket_read_metric_counter",
    "enable_bucket_write_metric_counter", "enable_gcsio_blob_generation", "enable_hot_key_logging",
    "enable_streaming_engine", "environment_cache_millis", "environment_config", "environment_option",
    "environment_options", "environment_type", "exclude_infer_dataclass_field_type", "expansion_port",
    "experiment", "experiments", "extra_package", "extra_packages", "file_to_stage", "files_to_stage",
    "flexrs_goal", "flink_job_server_jar", "flink_master", "flink_submit_uber_jar", "flink_version",
    "force_cloudpickle_deterministic_coders", "gbek", "gcp_oauth_scope", "gcp_oauth_scopes",
    "gcs_custom_audit_entries", "gcs_custom_audit_entry", "hdfs_full_urls", "hdfs_host", "hdfs_port",
    "hdfs_user", "impersonate_service_account", "jar_cache_dir", "job-server-timeout", "job_endpoint",
    "job_name", "job_port", "job_server_java_launcher", "job_server_jvm_properties",
    "job_server_jvm_property", "job_server_timeout", "kafka_streams_job_server_jar", "label", "labels",
    "machine_type", "maven_repository_url", "max_cache_memory_usage_mb", "max_num_workers",
    "max_parallelism", "min_cpu_platform", "network", "no_auth", "no_direct_runner_use_stacked_bundle",
    "no_gcsio_throttling_counter", "no_pipeline_type_check", "no_save_main_session", "no_use_public_ips",
    "no_wait_until_finish", "num_workers", "number_of_worker_harness_threads", "on_success_matcher",
    "output_executable_path", "parallelism", "performance_runtime_type_check", "pickle_library",
    "prebuild_sdk_container_base_image", "prebuild_sdk_container_engine", "prism_beam_version_override",
    "prism_location", "prism_log_kind", "prism_log_level", "profile_cpu", "profile_location",
    "profile_memory", "profile_postprocess_interval_sec", "profile_sample_rate", "profile_temp_location",
    "profile_upload_interval_sec", "profiler_agent", "profiler_extra_arg", "profiler_extra_args",
    "profiler_extra_env_var", "profiler_extra_env_vars", "profiler_stop_after_crash",
    "profiler_stop_after_sec", "project", "pubsub_root_url", "region", "requirements_cache",
    "requirements_cache_only_sources", "requirements_file", "resource_hint", "resource_hints", "runner",
    "runtime_type_check", "s3_access_key_id", "s3_api_version", "s3_disable_ssl", "s3_endpoint_url",
    "s3_region_name", "s3_secret_access_key", "s3_session_token", "s3_verify", "save_main_session",
    "sdk_container_image", "sdk_harness_container_image_overrides", "sdk_harness_log_level_overrides",
    "sdk_location", "sdk_worker_parallelism", "service_account_email", "setup_file", "spark_job_server_jar",
    "spark_master_url", "spark_rest_url", "spark_submit_uber_jar", "spark_version", "staging_location",
    "streaming", "subnetwork", "temp_location", "template_location", "transform_name_mapping",
    "type_check_additional", "type_check_strictness", "update", "update_compatibility_version",
    "use_public_ips", "use_transform_service", "user_agent", "wait_until_finish_duration",
    "worker_disk_type", "worker_harness_container_image", "worker_machine_type", "worker_region",
    "worker_zone", "zone"
))
