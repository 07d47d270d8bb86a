"""The config keys the Google provider reads (gcp:*), so a typo of one is caught before `pulumi up`.

Source: pulumi/pulumi-gcp v10.2.0 (requirements.txt allows 10.x) sdk/python/pulumi_gcp/config/vars.py: the
names its `__config__.get*` calls read. tests/test_hostile_input.py checks them against the installed SDK; the gate
also accepts what the installed SDK reads (provider_keys), since requirements.txt allows a newer 10.x.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path

GCP_PROVIDER_KEYS = frozenset((
    "accessApprovalCustomEndpoint", "accessContextManagerCustomEndpoint", "accessToken",
    "activeDirectoryCustomEndpoint", "addPulumiAttributionLabel", "agentIdentityCustomEndpoint",
    "agentRegistryCustomEndpoint", "agenticApplicationsCustomEndpoint", "alloydbCustomEndpoint",
    "apiGatewayCustomEndpoint", "apigeeCustomEndpoint", "apihubCustomEndpoint", "apikeysCustomEndpoint",
    "appEngineCustomEndpoint", "apphubCustomEndpoint", "artifactRegistryCustomEndpoint",
    "assuredWorkloadsCustomEndpoint", "backupDrCustomEndpoint", "batching", "beyondcorpCustomEndpoint",
    "bigQueryCustomEndpoint", "biglakeCustomEndpoint", "biglakeHiveCustomEndpoint",
    "biglakeIcebergCustomEndpoint", "bigqueryAnalyticsHubCustomEndpoint",
    "bigqueryConnectionCustomEndpoint", "bigqueryDataTransferCustomEndpoint",
    "bigqueryDatapolicyCustomEndpoint", "bigqueryDatapolicyv2CustomEndpoint",
    "bigqueryReservationCustomEndpoint", "bigtableCustomEndpoint", "billingBudgetsCustomEndpoint",
    "billingCustomEndpoint", "billingProject", "binaryAuthorizationCustomEndpoint",
    "blockchainNodeEngineCustomEndpoint", "certificateManagerCustomEndpoint", "cesCustomEndpoint",
    "chronicleCustomEndpoint", "cloudAssetCustomEndpoint", "cloudBillingCustomEndpoint",
    "cloudBuildCustomEndpoint", "cloudFunctionsCustomEndpoint", "cloudIdentityCustomEndpoint",
    "cloudIdsCustomEndpoint", "cloudQuotasCustomEndpoint", "cloudResourceManagerCustomEndpoint",
    "cloudRunCustomEndpoint", "cloudRunV2CustomEndpoint", "cloudSchedulerCustomEndpoint",
    "cloudSecurityComplianceCustomEndpoint", "cloudSupportCustomEndpoint", "cloudTasksCustomEndpoint",
    "cloudbuildv2CustomEndpoint", "clouddeployCustomEndpoint", "clouddomainsCustomEndpoint",
    "cloudfunctions2CustomEndpoint", "colabCustomEndpoint", "composerCustomEndpoint",
    "computeCustomEndpoint", "configCustomEndpoint", "contactCenterInsightsCustomEndpoint",
    "containerAnalysisCustomEndpoint", "containerAttachedCustomEndpoint", "containerAwsCustomEndpoint",
    "containerAzureCustomEndpoint", "containerCustomEndpoint", "coreBillingCustomEndpoint", "credentials",
    "dataCatalogCustomEndpoint", "dataFusionCustomEndpoint", "dataLineageCustomEndpoint",
    "dataLossPreventionCustomEndpoint", "dataPipelineCustomEndpoint",
    "databaseMigrationServiceCustomEndpoint", "dataflowCustomEndpoint", "dataformCustomEndpoint",
    "dataplexCustomEndpoint", "dataprocCustomEndpoint", "dataprocGdcCustomEndpoint",
    "dataprocMetastoreCustomEndpoint", "datastreamCustomEndpoint", "defaultLabels", "deletionPolicy",
    "deploymentManagerCustomEndpoint", "developerConnectCustomEndpoint", "dialogflowCustomEndpoint",
    "dialogflowCxCustomEndpoint", "disableGlobalProjectWarning", "disableGooglePartnerName",
    "discoveryEngineCustomEndpoint", "dnsCustomEndpoint", "documentAiCustomEndpoint",
    "documentAiWarehouseCustomEndpoint", "edgecontainerCustomEndpoint", "edgenetworkCustomEndpoint",
    "essentialContactsCustomEndpoint", "eventarcCustomEndpoint", "externalCredentials",
    "filestoreCustomEndpoint", "firebaseAiLogicCustomEndpoint", "firebaseAppCheckCustomEndpoint",
    "firebaseAppHostingCustomEndpoint", "firebaseCustomEndpoint", "firebaseDataConnectCustomEndpoint",
    "firebaseDatabaseCustomEndpoint", "firebaseExtensionsCustomEndpoint", "firebaseHostingCustomEndpoint",
    "firebaseRemoteConfigCustomEndpoint", "firebaseStorageCustomEndpoint", "firebaserulesCustomEndpoint",
    "firestoreCustomEndpoint", "geminiCustomEndpoint", "geminiDataAnalyticsCustomEndpoint",
    "gkeBackupCustomEndpoint", "gkeHub2CustomEndpoint", "gkeHubCustomEndpoint", "gkeonpremCustomEndpoint",
    "googlePartnerName", "healthcareCustomEndpoint", "hypercomputeclusterCustomEndpoint",
    "iam2CustomEndpoint", "iam3CustomEndpoint", "iamBetaCustomEndpoint", "iamCredentialsCustomEndpoint",
    "iamCustomEndpoint", "iamWorkforcePoolCustomEndpoint", "iapCustomEndpoint",
    "identityPlatformCustomEndpoint", "impersonateServiceAccount", "impersonateServiceAccountDelegates",
    "integrationConnectorsCustomEndpoint", "integrationsCustomEndpoint", "kmsCustomEndpoint",
    "licenseManagerCustomEndpoint", "loggingCustomEndpoint", "lookerCustomEndpoint", "lustreCustomEndpoint",
    "managedKafkaCustomEndpoint", "memcacheCustomEndpoint", "memorystoreCustomEndpoint",
    "migrationCenterCustomEndpoint", "modelArmorCustomEndpoint", "modelArmorGlobalCustomEndpoint",
    "monitoringCustomEndpoint", "netappCustomEndpoint", "networkConnectivityCustomEndpoint",
    "networkConnectivityv1CustomEndpoint", "networkManagementCustomEndpoint",
    "networkManagementv1CustomEndpoint", "networkSecurityCustomEndpoint", "networkServicesCustomEndpoint",
    "observabilityCustomEndpoint", "oracleDatabaseCustomEndpoint", "orgPolicyCustomEndpoint",
    "osConfigCustomEndpoint", "osConfigV2CustomEndpoint", "osLoginCustomEndpoint",
    "parallelstoreCustomEndpoint", "parameterManagerCustomEndpoint",
    "parameterManagerRegionalCustomEndpoint", "pollInterval", "preferGlobalEndpoints",
    "preferRegionalEndpoints", "privatecaCustomEndpoint", "privilegedAccessManagerCustomEndpoint",
    "project", "publicCaCustomEndpoint", "pubsubCustomEndpoint", "pubsubLiteCustomEndpoint",
    "pulumiAttributionLabelAdditionStrategy", "recaptchaEnterpriseCustomEndpoint", "redisCustomEndpoint",
    "region", "requestReason", "requestTimeout", "resourceManager3CustomEndpoint",
    "resourceManagerCustomEndpoint", "resourceManagerV3CustomEndpoint", "runtimeConfigCustomEndpoint",
    "runtimeconfigCustomEndpoint", "saasRuntimeCustomEndpoint", "scopes", "secretManagerCustomEndpoint",
    "secretManagerRegionalCustomEndpoint", "secureSourceManagerCustomEndpoint",
    "securityCenterCustomEndpoint", "securityCenterManagementCustomEndpoint",
    "securityCenterV2CustomEndpoint", "securityScannerCustomEndpoint", "securitypostureCustomEndpoint",
    "serviceDirectoryCustomEndpoint", "serviceManagementCustomEndpoint", "serviceNetworkingCustomEndpoint",
    "serviceUsageCustomEndpoint", "serviceUsageV2CustomEndpoint", "siteVerificationCustomEndpoint",
    "skipRegionValidation", "sourceRepoCustomEndpoint", "spannerCustomEndpoint", "sqlCustomEndpoint",
    "storageBatchOperationsCustomEndpoint", "storageControlCustomEndpoint", "storageCustomEndpoint",
    "storageFtpCustomEndpoint", "storageInsightsCustomEndpoint", "storageTransferCustomEndpoint",
    "tagsCustomEndpoint", "tagsLocationCustomEndpoint", "tpuV2CustomEndpoint", "transcoderCustomEndpoint",
    "universeDomain", "userProjectOverride", "vectorSearchCustomEndpoint", "vertexAiAadCustomEndpoint",
    "vertexAiCustomEndpoint", "vmwareengineCustomEndpoint", "vpcAccessCustomEndpoint",
    "workbenchCustomEndpoint", "workflowsCustomEndpoint", "workloadIdentityCustomEndpoint",
    "workstationsCustomEndpoint", "zone"
))


# A read of the generated config/vars.py: `__config__.get('zone')`, `__config__.get_bool('...')`, ...
_CONFIG_READ = re.compile(r"""__config__\.\w+\(\s*(['"])([^'"]+)\1""")


@functools.cache
def installed_keys() -> frozenset[str]:
    """The keys the installed pulumi_gcp reads (its config/vars.py, read as text, not imported): the default
    provider is the plugin of the SDK `pulumi install` put in the venv, and requirements.txt allows any 10.x,
    whose newer releases add keys (service endpoints) this table does not list yet. Empty when it is not
    installed. A pattern, not `ast.parse`: on CPython 3.11 ast.parse can fail at random with "AST constructor
    recursion depth mismatch" in a process with threads (python/cpython#106905), and the file is generated
    code of one shape."""
    try:
        spec = importlib.util.find_spec("pulumi_gcp")  # a top-level package: found, not imported
        if spec is None or spec.origin is None:
            return frozenset()
        text = (Path(spec.origin).parent / "config" / "vars.py").read_text()
    except (ImportError, OSError, ValueError):
        return frozenset()
    return frozenset(m.group(2) for m in _CONFIG_READ.finditer(text))


def provider_keys() -> frozenset[str]:
    """Every key a Google provider of 10.x may read: this table and the installed SDK's."""
    return GCP_PROVIDER_KEYS | installed_keys()
