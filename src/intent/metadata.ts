/**
 * ObjectMeta: the fields herald reads. Everything else Kubernetes writes there
 * (uid, resourceVersion, generation, managedFields, ownerReferences, …) is
 * accepted and dropped.
 */
import { z } from 'zod';
import { annotationMap, checkedString, labelMap, timestamp } from './fields.js';
import { checkDns1123Label } from './names.js';

export const DEFAULT_NAMESPACE = 'default';

/** Metadata of a cluster-scoped object (a namespace, if present, is ignored). */
export function clusterMetadata(checkName: (s: string) => string | undefined) {
  return z.object({
    name: checkedString(checkName),
    labels: labelMap.default({}),
    annotations: annotationMap.default({}),
    creationTimestamp: timestamp.optional(),
  });
}

/** Metadata of a namespaced object; an absent or empty namespace is "default". */
export function namespacedMetadata(checkName: (s: string) => string | undefined) {
  return clusterMetadata(checkName).extend({
    namespace: z
      .string()
      .transform((ns) => (ns === '' ? DEFAULT_NAMESPACE : ns))
      .pipe(checkedString((ns) => checkDns1123Label(ns, 'namespace')))
      .default(DEFAULT_NAMESPACE),
  });
}
