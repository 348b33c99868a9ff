// Conditionals only, in one line range of src/store/etcd/ownership.ts (etcdown helper's run).
// MUT_RANGE="387-1321" MUT_TAG=all MUTATION_SCOPE=src/store/etcd/ownership.ts npx stryker run stryker.etcdown.mjs
import base from './stryker.config.mjs';
const range = process.env.MUT_RANGE ?? '387-1321';
const tag = process.env.MUT_TAG ?? range;
export default {
  ...base,
  mutate: [`src/store/etcd/ownership.ts:${range}`],
  mutator: {
    excludedMutations: ['ArithmeticOperator', 'ArrayDeclaration', 'ArrowFunction', 'AssignmentOperator', 'BlockStatement', 'MethodExpression', 'ObjectLiteral', 'OptionalChaining', 'Regex', 'StringLiteral', 'UnaryOperator', 'UpdateOperator'],
  },
  incrementalFile: `reports/mutation/etcdown-${tag}.incremental.json`,
  jsonReporter: { fileName: `reports/mutation/etcdown-${tag}.json` },
  tempDirName: `.stryker-tmp/etcdown-${tag}`,
};
