/**
 * ServerClaim: a request for one Server, booted with an image and an ignition.
 *
 * Additions to upstream (all optional; README, 'A claim's boot attempts'): `spec.bootPolicy`, `spec.bootMethod`,
 * `spec.bootCompletion` (which SBC conditions mean "booted", the per-attempt timeout and the number of
 * attempts), `status.boot` (attempt bookkeeping that survives manager restarts) and `status.conditions`
 * (`Bound`, `BootConfigurationReady`, `Booted`).
 */
import {
  CLAIM_COMPLETION_SIGNALS,
  EXTERNAL_SIGNAL_PREFIX,
  REGISTRATION_NOT_FOR_CLAIMS,
} from '../vocabulary.js';
import { BootMethodSchema } from './boot-method.js';
import { BootPolicySchema } from './boot-policy.js';
import {
  AGE_COLUMN,
  Conditions,
  ConditionType,
  DateTime,
  Duration,
  immutable,
  type KindDefinition,
  LabelSelector,
  LocalObjectReference,
  type ObjectMeta,
  type Static,
  StringEnum,
  StringMap,
  Type,
} from './schema.js';

/** Bounds of the per-attempt durations: long enough for any firmware, short enough for every timer. */
export const MIN_ATTEMPT_DURATION = '1s';
export const MAX_ATTEMPT_DURATION = '24h';
const boundedDuration = (field: string) => ({
  // CEL's duration() reads Go durations; a value it cannot represent fails validation instead of a timer.
  rule: `duration(self) >= duration('${MIN_ATTEMPT_DURATION}') && duration(self) <= duration('${MAX_ATTEMPT_DURATION}')`,
  message: `${field} must be between ${MIN_ATTEMPT_DURATION} and ${MAX_ATTEMPT_DURATION}`,
});
const SIGNAL_RULE = `self.all(c, c in [${CLAIM_COMPLETION_SIGNALS.map((s) => `'${s}'`).join(', ')}] || c.matches('^${EXTERNAL_SIGNAL_PREFIX}[A-Z][A-Za-z0-9]*$'))`;

export const BootCompletion = Type.Object(
  {
    conditions: Type.Optional(
      Type.Array(ConditionType({ minLength: 1, maxLength: 64 }), {
        minItems: 1,
        maxItems: 8,
        'x-kubernetes-list-type': 'set',
        'x-kubernetes-validations': [
          {
            rule: SIGNAL_RULE,
            message: `conditions must be boot signals a claim receives (${CLAIM_COMPLETION_SIGNALS.join(', ')}) or custom signals named ${EXTERNAL_SIGNAL_PREFIX}<Name>, set on the SBC by an external writer; ${REGISTRATION_NOT_FOR_CLAIMS}`,
          },
        ],
        description:
          'SBC condition types that must ALL be True for the current attempt: boot signals, or External<Name> types an external writer sets on the SBC; default from --boot-completion-conditions (BootStateReceived).',
      }),
    ),
    timeout: Type.Optional(
      Duration({
        maxLength: 32,
        description: 'Per-attempt deadline as a Go duration (e.g. 15m), 1s to 24h; default --boot-timeout.',
        'x-kubernetes-validations': [boundedDuration('timeout')],
      }),
    ),
    netbootTimeout: Type.Optional(
      Duration({
        maxLength: 32,
        description:
          'The first fetch of an attempt (iPXE script) must arrive this long after power-on, 1s to 24h, else the attempt is retried at once (NetbootNotObserved); default --netboot-timeout.',
        'x-kubernetes-validations': [boundedDuration('netbootTimeout')],
      }),
    ),
    maxAttempts: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 10,
        description: 'Attempts in all (first boot + retries); default --boot-max-attempts.',
      }),
    ),
  },
  { description: 'When a boot counts as completed, and how long and how often to try.' },
);
export type BootCompletion = Static<typeof BootCompletion>;

const Toleration = Type.Object(
  {
    key: Type.String({ minLength: 1, description: 'Taint key to tolerate.' }),
    operator: Type.Optional(StringEnum(['Equal', 'Exists'] as const, { description: 'Equal or Exists.' })),
    value: Type.Optional(Type.String({ description: 'Taint value to match (Equal).' })),
    effect: Type.Optional(
      StringEnum(['NoBind', 'Evict'] as const, { description: 'Taint effect to tolerate.' }),
    ),
  },
  { description: 'Lets a claim bind a server carrying a matching taint.' },
);

/** One boot attempt: when it began, was powered on, saw each signal, ended, and how. */
export const AttemptRecord = Type.Object(
  {
    attempt: Type.Integer({ minimum: 0, description: 'Attempt number.' }),
    startedAt: Type.Optional(DateTime()),
    poweredOnAt: Type.Optional(DateTime()),
    signals: Type.Optional(
      StringMap({ description: 'Signal type → when it was first seen True for this attempt (RFC 3339).' }),
    ),
    endedAt: Type.Optional(DateTime()),
    result: Type.Optional(
      Type.String({ description: 'BootCompleted, TimedOut, NetbootNotObserved or Adopted.' }),
    ),
  },
  { description: 'One boot attempt.' },
);

/**
 * How a claim picks its Server (upstream metal-operator's rule, plus the refusal flag), stated in the
 * CRD so `kubectl explain serverclaim.spec.serverSelector` shows it.
 */
const BINDING_RULE =
  'Binding: serverRef names the one Server; otherwise serverSelector chooses among the Servers whose labels match; with neither serverRef nor serverSelector the claim binds ANY Available Server (as upstream metal-operator does). Only Servers that are Available, unclaimed, not unclaimable and whose taints the claim tolerates are bound. A manager started with --require-server-selection refuses claims with neither field (Bound=False, reason ServerSelectionRequired).';

export const ServerClaimSpec = Type.Object(
  {
    power: StringEnum(['On', 'Off'] as const, {
      // Upstream's own constants (PowerOn, PowerOff); the claim controller also refuses other values
      // of objects stored before this enum (Booted=False, InvalidPower).
      description: 'Desired power state of the server: On or Off.',
    }),
    serverRef: Type.Optional(
      LocalObjectReference(
        `Server to claim by name; when set, only that Server is bound. ${BINDING_RULE} Written by the controller once bound; immutable once set.`,
        { 'x-kubernetes-validations': [immutable('serverRef')] },
      ),
    ),
    serverSelector: Type.Optional(
      LabelSelector(
        `Labels of the server to claim (a metav1.LabelSelector: all matchLabels and matchExpressions must match; an empty selector {} matches every Server). ${BINDING_RULE} Immutable once set.`,
        { 'x-kubernetes-validations': [immutable('serverSelector')] },
      ),
    ),
    ignitionSecretRef: Type.Optional(LocalObjectReference('Secret holding the ignition of the server.')),
    image: Type.String({ description: 'Boot image, resolved through the image catalog.' }),
    tolerations: Type.Optional(Type.Array(Toleration, { description: 'Taints this claim tolerates.' })),
    userDataRef: Type.Optional(LocalObjectReference('Secret with user-data for the claimed server.')),
    bootPolicy: Type.Optional(
      BootPolicySchema('NetBootAlways or NetBootOnce; default --default-boot-policy.'),
    ),
    bootMethod: Type.Optional(
      BootMethodSchema(
        "PXE (iPXE script, BIOS or UEFI), HTTPBoot (UEFI HTTP boot of a UKI) or VirtualMedia (the BMC boots the attempt's ISO once, no DHCP needed); default --default-boot-method.",
      ),
    ),
    bootCompletion: Type.Optional(BootCompletion),
  },
  {
    description: 'Desired state of a ServerClaim.',
    'x-kubernetes-validations': [
      { message: 'serverRef is required once set', rule: '!has(oldSelf.serverRef) || has(self.serverRef)' },
      {
        message: 'serverSelector is required once set',
        rule: '!has(oldSelf.serverSelector) || has(self.serverSelector)',
      },
    ],
  },
);

export const ServerClaimStatus = Type.Object(
  {
    phase: Type.Optional(Type.String({ description: 'Bound or Unbound.' })),
    boot: Type.Optional(
      Type.Object(
        {
          attempt: Type.Integer({
            minimum: 0,
            description: "Current boot attempt, starting at 1; the SBC's spec.bootAttempt.",
          }),
          phase: Type.Optional(
            Type.String({
              description:
                'Phase of the attempt: PoweredOff, WaitingForConfiguration, AwaitingNetboot, AwaitingSignals, Completed, Exhausted, Refused (a permanent BMC refusal ended the series).',
            }),
          ),
          firstAttempt: Type.Optional(
            Type.Integer({ minimum: 0, description: 'First attempt number of the current series.' }),
          ),
          netbootDeadline: Type.Optional(
            DateTime({ description: 'When the current attempt must have fetched its script.' }),
          ),
          adoptedAt: Type.Optional(
            DateTime({
              description:
                'When the operator found this claim without bookkeeping and adopted its running server.',
            }),
          ),
          lastFailure: Type.Optional(
            Type.String({
              maxLength: 2048,
              description:
                'How the previous attempt ended, in words (arrived and missing signals), while this one runs.',
            }),
          ),
          history: Type.Optional(
            Type.Array(AttemptRecord, {
              maxItems: 10,
              description: 'The last attempts, oldest first (at most 10).',
            }),
          ),
          attemptStartedAt: Type.Optional(DateTime({ description: 'When the current attempt began.' })),
          poweredOnAt: Type.Optional(
            DateTime({ description: 'When the server was powered on for the current attempt.' }),
          ),
          deadline: Type.Optional(DateTime({ description: 'When the current attempt times out.' })),
          completedAt: Type.Optional(DateTime({ description: 'When the claim became Booted.' })),
          series: Type.Optional(
            Type.Integer({
              minimum: 0,
              description: 'Attempt series; bumped by the retry operation annotation.',
            }),
          ),
        },
        { description: 'Bookkeeping of boot attempts, stored so that it survives manager restarts.' },
      ),
    ),
    conditions: Type.Optional(Conditions('Bound, BootConfigurationReady and Booted.')),
  },
  { description: 'Observed state of a ServerClaim.' },
);

export type ServerClaimSpec = Static<typeof ServerClaimSpec>;
export type ServerClaimStatus = Static<typeof ServerClaimStatus>;
export type ServerClaim = {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
  spec: ServerClaimSpec;
  status?: ServerClaimStatus;
};

export const ServerClaimKind: KindDefinition = {
  kind: 'ServerClaim',
  plural: 'serverclaims',
  singular: 'serverclaim',
  shortNames: ['scl'],
  scope: 'Namespaced',
  description: 'ServerClaim requests one Server and boots it with an image and an ignition.',
  properties: { spec: ServerClaimSpec, status: ServerClaimStatus },
  printerColumns: [
    { name: 'Server', type: 'string', jsonPath: '.spec.serverRef.name' },
    { name: 'Ignition', type: 'string', jsonPath: '.spec.ignitionSecretRef.name' },
    { name: 'Image', type: 'string', jsonPath: '.spec.image' },
    { name: 'Phase', type: 'string', jsonPath: '.status.phase' },
    AGE_COLUMN,
    {
      name: 'Booted',
      type: 'string',
      jsonPath: ".status.conditions[?(@.type=='Booted')].reason",
      priority: 1,
    },
    { name: 'Attempt', type: 'integer', jsonPath: '.status.boot.attempt', priority: 1 },
    { name: 'BootPhase', type: 'string', jsonPath: '.status.boot.phase', priority: 1 },
  ],
  hasStatusSubresource: true,
};
