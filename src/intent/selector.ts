/**
 * Kubernetes LabelSelector: schema (with apimachinery's validation rules) and
 * matching. `matchesSelector` is pure and has no dependencies beyond its
 * arguments.
 */
import { z } from 'zod';
import { labelMap } from './fields.js';
import { checkLabelValue, checkQualifiedName } from './names.js';

export const SELECTOR_OPERATORS = ['In', 'NotIn', 'Exists', 'DoesNotExist'] as const;
export type SelectorOperator = (typeof SELECTOR_OPERATORS)[number];

const labelKey = z.string().check((ctx) => {
  const message = checkQualifiedName(ctx.value);
  if (message !== undefined) ctx.issues.push({ code: 'custom', message, input: ctx.value });
});

const labelValue = z.string().check((ctx) => {
  const message = checkLabelValue(ctx.value);
  if (message !== undefined) ctx.issues.push({ code: 'custom', message, input: ctx.value });
});

export const selectorRequirementSchema = z
  .strictObject({
    key: labelKey,
    operator: z.enum(SELECTOR_OPERATORS),
    values: z.array(labelValue).optional(),
  })
  .check((ctx) => {
    const { operator, values } = ctx.value;
    const count = values?.length ?? 0;
    if ((operator === 'In' || operator === 'NotIn') && count === 0) {
      ctx.issues.push({
        code: 'custom',
        message: `operator ${operator} needs at least one value`,
        input: values,
        path: ['values'],
      });
    }
    if ((operator === 'Exists' || operator === 'DoesNotExist') && count > 0) {
      ctx.issues.push({
        code: 'custom',
        message: `operator ${operator} must not have values`,
        input: values,
        path: ['values'],
      });
    }
  });

// Strict, as the API server's strict field validation: a misspelt field is an error, not a silently wider selector.
export const labelSelectorSchema = z.strictObject({
  matchLabels: labelMap.default({}),
  matchExpressions: z.array(selectorRequirementSchema).default([]),
});

export type SelectorRequirement = z.output<typeof selectorRequirementSchema>;
export type LabelSelector = z.output<typeof labelSelectorSchema>;

/** Anything shaped like a LabelSelector (parsed, or built by hand). */
export interface LabelSelectorLike {
  readonly matchLabels?: Readonly<Record<string, string>>;
  readonly matchExpressions?: readonly {
    readonly key: string;
    readonly operator: SelectorOperator;
    readonly values?: readonly string[];
  }[];
}

export type Labels = Readonly<Record<string, string>>;

/**
 * Whether `labels` satisfy `selector`, as metav1.LabelSelectorAsSelector
 * would: a nil selector and an empty selector both match everything; all
 * matchLabels and all expressions must hold; NotIn and DoesNotExist hold for
 * an absent key.
 */
const labelOf = (labels: Labels, key: string): string | undefined => (Object.hasOwn(labels, key) ? labels[key] : undefined);

export function matchesSelector(selector: LabelSelectorLike | undefined, labels: Labels): boolean {
  if (selector === undefined) return true;
  // No closure or entry arrays per call: selectors run once per (selector, object), 10,000s of times per pass.
  const want = selector.matchLabels;
  if (want !== undefined) {
    for (const key in want) if (Object.hasOwn(want, key) && labelOf(labels, key) !== want[key]) return false;
  }
  for (const req of selector.matchExpressions ?? []) {
    const value = labelOf(labels, req.key);
    const values = req.values ?? [];
    switch (req.operator) {
      case 'In':
        if (value === undefined || !values.includes(value)) return false;
        break;
      case 'NotIn':
        if (value !== undefined && values.includes(value)) return false;
        break;
      case 'Exists':
        if (value === undefined) return false;
        break;
      case 'DoesNotExist':
        if (value !== undefined) return false;
        break;
    }
  }
  return true;
}
